package cmdq_test

import (
	"strings"
	"testing"
)

// TestLibraryUsesOTelAPIOnly: the library's packages depend on the
// OpenTelemetry API only (otel, otel/trace, otel/propagation,
// otel/attribute, otel/codes): the SDK, the exporters and the OTLP
// protobufs are for programs that choose them (cmd/cmdq, tests), so a
// program that does not trace pays nothing for them.
func TestLibraryUsesOTelAPIOnly(t *testing.T) {
	t.Parallel()
	out := goCmd(t, ".", nil, "list", "-deps", ".", "./api", "./console", "./client", "./cmdqtest", "./metrics",
		"./storage/embedded", "./storage/azure")
	api := false
	for _, line := range strings.Split(out, "\n") {
		p := strings.TrimSpace(line)
		switch {
		case p == "go.opentelemetry.io/otel/trace":
			api = true
		case strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk"), strings.HasPrefix(p, "go.opentelemetry.io/otel/exporters"),
			strings.HasPrefix(p, "go.opentelemetry.io/proto"), strings.HasPrefix(p, "google.golang.org/grpc"):
			t.Errorf("the library depends on %s; only the OpenTelemetry API belongs in it", p)
		}
	}
	if !api {
		t.Error("the library does not depend on go.opentelemetry.io/otel/trace: is tracing built in?")
	}
}
