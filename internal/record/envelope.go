package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrMalformedMessage: a queue message is not an Envelope.
var ErrMalformedMessage = errors.New("cmdq: malformed queue message")

// Envelope is the queue message: {"id":"…","type":"…"} (the data layout:
// the parameters stay in the commands table).
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

// ParseEnvelope parses message text: a JSON object with exactly "id" and
// "type", both non-empty strings. It does not check their form (the
// processor does, with commands.ValidateID and ValidateType). Errors wrap
// ErrMalformedMessage.
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
	if e.ID == "" || e.Type == "" {
		return Envelope{}, fmt.Errorf("%w: id and type are required (got %.100q)", ErrMalformedMessage, text)
	}
	return e, nil
}
