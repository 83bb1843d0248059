package cmdq

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cmdq-dev/cmdq/internal/engine/model"
	"github.com/cmdq-dev/cmdq/internal/engine/registry"
)

// filled returns a T with every field set to a non-zero value, nested
// structs, slices (one element), maps (one entry) and pointers included.
func filled[T any](t *testing.T) T {
	t.Helper()
	var v T
	fill(t, reflect.ValueOf(&v).Elem(), "")
	return v
}

func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(time.Second))
		} else {
			v.SetInt(7)
		}
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), path+"[0]")
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+"[key]")
		fill(t, e, path+"[elem]")
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), path)
		v.Set(p)
	case reflect.Interface:
		if v.Type() == reflect.TypeFor[error]() {
			v.Set(reflect.ValueOf(errors.New("x")))
			return
		}
		t.Fatalf("%s: cannot fill an interface %s", path, v.Type())
	case reflect.Func:
		v.Set(reflect.MakeFunc(v.Type(), func([]reflect.Value) []reflect.Value {
			return []reflect.Value{reflect.Zero(v.Type().Out(0))}
		}))
	default:
		t.Fatalf("%s: cannot fill a %s", path, v.Kind())
	}
}

// missing returns the paths of v's zero fields, nested ones included.
func missing(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			if v.Interface().(time.Time).IsZero() {
				return []string{path}
			}
			return nil
		}
		var out []string
		for i := range v.NumField() {
			out = append(out, missing(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		return missing(v.Index(0), path+"[0]")
	case reflect.Map:
		if v.Len() == 0 {
			return []string{path}
		}
		var out []string
		for _, k := range v.MapKeys() {
			out = append(out, missing(v.MapIndex(k), path+"[elem]")...)
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return missing(v.Elem(), path)
	default:
		if v.IsZero() {
			return []string{path}
		}
		return nil
	}
}

// TestConversionsCarryEveryField checks that the hand-written conversions
// between the engine's types and this package's (convert.go) carry every
// field: a field added on one side and not copied fails here. (The types
// converted with a Go conversion are checked by the compiler.)
func TestConversionsCarryEveryField(t *testing.T) {
	health := filled[model.Health](t)
	health.State = model.ProcessorUnhealthy
	obs := filled[model.Observation](t)
	obs.Kind, obs.Health = model.ObservedHealth, health
	for name, got := range map[string]any{
		"Status":           statusOut(filled[model.Status](t)),
		"Event":            eventOut(filled[model.Event](t)),
		"PoisonPage":       poisonPageOut(filled[model.PoisonPage](t)),
		"CommandPage":      commandPageOut(filled[model.CommandPage](t)),
		"ProcessorHealth":  healthOut(health),
		"RunForSummary":    summaryOut(filled[model.Summary](t)),
		"Observation":      observationOut(obs),
		"HandlerOptions":   handlerOptions(filled[registry.Options](t)),
		"CommandQuery":     filled[CommandQuery](t).engine(),
		"CommandOptions":   filled[CommandOptions](t).engine(),
		"registry.Options": filled[HandlerOptions](t).engine(),
	} {
		for _, p := range missing(reflect.ValueOf(got), name) {
			switch {
			case p == "HandlerOptions.Middleware":
				continue // left out on purpose (Client.Lookup)
			case strings.HasSuffix(p, ".Waiting") || p == "ProcessorHealth.Wake" || p == "ProcessorHealth.Unreachable" ||
				p == "Observation.Health.Wake" || p == "Observation.Health.Unreachable" ||
				strings.HasSuffix(p, "Health.ClockOffset") || strings.HasSuffix(p, "Health.ClockOffsetMS") || strings.HasSuffix(p, "Health.ClockSkewed"):
				continue // the Client's own, not the engine's
			}
			t.Errorf("%s is not carried over", p)
		}
	}
}

// TestEnumsMatchTheEngine checks that this package's named string values
// are the engine's, value for value: the conversions rely on it.
func TestEnumsMatchTheEngine(t *testing.T) {
	pairs := []struct{ root, engine string }{
		{string(StatePending), string(model.StatePending)}, {string(StateRunning), string(model.StateRunning)},
		{string(StateRetrying), string(model.StateRetrying)}, {string(StateCompleted), string(model.StateCompleted)},
		{string(StatePoisoned), string(model.StatePoisoned)}, {string(StateDiscarded), string(model.StateDiscarded)},
		{string(StateCancelled), string(model.StateCancelled)}, {string(StateScheduled), string(model.StateScheduled)},
		{string(EventCreated), string(model.EventCreated)}, {string(EventStarted), string(model.EventStarted)},
		{string(EventStepCompleted), string(model.EventStepCompleted)}, {string(EventFailed), string(model.EventFailed)},
		{string(EventCompleted), string(model.EventCompleted)}, {string(EventPoisoned), string(model.EventPoisoned)},
		{string(EventLeaseLost), string(model.EventLeaseLost)}, {string(EventRequeued), string(model.EventRequeued)},
		{string(EventDiscarded), string(model.EventDiscarded)}, {string(EventCancelled), string(model.EventCancelled)},
		{string(EventDeferred), string(model.EventDeferred)}, {string(ObservedDeferred), string(model.ObservedDeferred)},
		{string(ProcessorStarting), string(model.ProcessorStarting)}, {string(ProcessorPolling), string(model.ProcessorPolling)},
		{string(ProcessorWorking), string(model.ProcessorWorking)}, {string(ProcessorIdle), string(model.ProcessorIdle)},
		{string(ProcessorDraining), string(model.ProcessorDraining)}, {string(ProcessorStopped), string(model.ProcessorStopped)},
		{string(ProcessorUnhealthy), string(model.ProcessorUnhealthy)},
		{string(StopDeadline), string(model.StopDeadline)}, {string(StopIdle), string(model.StopIdle)},
		{string(StopCancelled), string(model.StopCancelled)},
		{string(ObservedStarted), string(model.ObservedStarted)}, {string(ObservedCompleted), string(model.ObservedCompleted)},
		{string(ObservedFailed), string(model.ObservedFailed)}, {string(ObservedPoisoned), string(model.ObservedPoisoned)},
		{string(ObservedLeaseLost), string(model.ObservedLeaseLost)}, {string(ObservedPolled), string(model.ObservedPolled)},
		{string(ObservedAlert), string(model.ObservedAlert)}, {string(ObservedHealth), string(model.ObservedHealth)},
		{string(ObservedPaused), string(model.ObservedPaused)}, {string(ObservedResumed), string(model.ObservedResumed)},
		{string(ObservedWake), string(model.ObservedWake)}, {string(ObservedRing), string(model.ObservedRing)},
	}
	for _, p := range pairs {
		if p.root != p.engine {
			t.Errorf("%q here is %q in the engine", p.root, p.engine)
		}
	}
	for _, k := range []EventKind{EventCreated, EventStarted, EventStepCompleted, EventFailed, EventCompleted,
		EventPoisoned, EventLeaseLost, EventRequeued, EventDiscarded, EventCancelled} {
		if !k.Valid() || !model.EventKind(k).Valid() {
			t.Errorf("event kind %q is not valid on both sides", k)
		}
	}
}
