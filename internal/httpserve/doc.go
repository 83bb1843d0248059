// Package httpserve is the server plumbing that the HTTP API (package api)
// and the operator console (package console) share, so that each rule
// exists once: bearer tokens and their roles (Tokens, Authenticator), the
// failed-authentication limiter (Limiter), the Host check against DNS
// rebinding (Guard), RFC 9457 problem answers (WriteProblem, with the wire
// types of package client), and the middleware that gives every request
// its deadline and storage call budget, recovers panics and logs requests
// (Wrap).
package httpserve
