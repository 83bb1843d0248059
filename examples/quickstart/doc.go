// Package quickstart holds runnable, tested examples of cmdq's basic use on the
// embedded store with the cmdq.Client: register a typed handler, start
// processing, issue a command, wait for it and read its status and events;
// the operator's side of a poisoned command (list, requeue); and a test of a
// handler with the test kit (cmdqtest). See example_test.go and
// greeting_test.go; run them with
//
//	go test -v ./examples/quickstart
//
// The package itself exports nothing.
package quickstart
