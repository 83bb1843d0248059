// Package commands is the issuing side of cmdq: the Command interface, the
// queue message (Envelope), validation of command types and IDs, the Issuer
// that stores a command and enqueues it, and the reconciler that closes the
// gap when an enqueue fails after the command was stored.
package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// Command is a command's parameters. CommandType names the command type; it
// must be a constant for the type (it is called on the zero value) and match
// ValidateType. The value itself is JSON-encoded as the parameters.
type Command interface {
	CommandType() string
}

// Sentinel errors callers branch on (test with errors.Is).
var (
	// ErrInvalidType: the command type name breaks the naming rule.
	ErrInvalidType = errors.New("commands: invalid command type")
	// ErrInvalidID: the command ID is not a canonical lowercase UUID.
	ErrInvalidID = errors.New("commands: invalid command ID")
	// ErrInvalidParams: the parameters are not valid JSON.
	ErrInvalidParams = errors.New("commands: invalid params")
	// ErrParamsTooLarge: the JSON parameters exceed the limit.
	ErrParamsTooLarge = errors.New("commands: params too large")
	// ErrIDConflict: a command with this ID exists with a different type,
	// different parameters or a different correlation ID.
	ErrIDConflict = errors.New("commands: command ID already used with different params")
	// ErrEnqueueFailed: the command was stored but its queue message could
	// not be sent; it is durably marked for the reconciler, which will
	// enqueue it (the command is accepted and Result.ID is valid).
	ErrEnqueueFailed = errors.New("commands: enqueue failed")
	// ErrNotAccepted: the command was stored but neither enqueued nor marked
	// for the reconciler (storage failed for both), so nothing guarantees it
	// will run: it is not accepted. Issue it again with the same ID
	// (Result.ID): a re-issue of a pending, never-started command enqueues
	// it. The Issuer also retries the enqueue in the background while the
	// process lives (Options.EnqueueRetry). The error wraps the causes.
	ErrNotAccepted = errors.New("commands: command stored but not accepted (neither enqueued nor marked for the reconciler)")
	// ErrMalformedMessage: a queue message is not a valid Envelope.
	ErrMalformedMessage = errors.New("commands: malformed queue message")
)

// MaxTypeLength is the longest command type name, in characters.
const MaxTypeLength = 128

var typeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,127}$`)

// ValidateType checks a command type name: 1-128 characters, a letter first,
// then letters, digits, '.', '_' or '-'. The error wraps ErrInvalidType.
func ValidateType(name string) error {
	if !typeRE.MatchString(name) {
		return fmt.Errorf("%w: %q; a type name is 1-%d characters: a letter, then letters, digits, '.', '_' or '-' (e.g. \"billing.ChargeCard\")", ErrInvalidType, name, MaxTypeLength)
	}
	return nil
}

// ValidateID checks a command ID: a UUID in lowercase canonical form
// (8-4-4-4-12 hex digits). The error wraps ErrInvalidID.
func ValidateID(id string) error {
	u, err := uuid.Parse(id)
	if err != nil || u.String() != id {
		return fmt.Errorf("%w: %q; use a UUID in lowercase canonical form like \"7f0c2a9e-3b1d-4c8e-9f6a-1d2e3f4a5b6c\", or leave it empty to get a new one", ErrInvalidID, id)
	}
	return nil
}

// NewID returns a new random command ID (UUID version 4).
func NewID() string { return uuid.NewString() }

// NewOrderedID returns a new time-ordered command ID (UUID version 7: IDs
// made later sort after earlier ones). It falls back to NewID if the
// system's random source fails.
func NewOrderedID() string {
	u, err := uuid.NewV7()
	if err != nil {
		return NewID()
	}
	return u.String()
}

// Envelope is the queue message: {"id":"…","type":"…"}. The parameters stay
// in the commands table.
type Envelope struct {
	// ID is the command ID.
	ID string `json:"id"`
	// Type is the command type name.
	Type string `json:"type"`
}

// Marshal returns the message text.
func (e Envelope) Marshal() string {
	b, _ := json.Marshal(e) // two strings: cannot fail
	return string(b)
}

// ParseEnvelope parses and validates message text: a JSON object with exactly
// "id" (valid ID) and "type" (valid type). Errors wrap ErrMalformedMessage.
func ParseEnvelope(text string) (Envelope, error) {
	var e Envelope
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v (want {\"id\":\"<uuid>\",\"type\":\"<type>\"}, got %.100q)", ErrMalformedMessage, err, text)
	}
	if dec.More() {
		return Envelope{}, fmt.Errorf("%w: trailing data after the JSON object (got %.100q)", ErrMalformedMessage, text)
	}
	if err := ValidateID(e.ID); err != nil {
		return Envelope{}, fmt.Errorf("%w: %w", ErrMalformedMessage, err)
	}
	if err := ValidateType(e.Type); err != nil {
		return Envelope{}, fmt.Errorf("%w: %w", ErrMalformedMessage, err)
	}
	return e, nil
}
