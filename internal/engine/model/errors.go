package model

import "errors"

// Sentinel errors of reading and operating (documented in package cmdq).
var (
	ErrNotFound            = errors.New("cmdq: command not found")
	ErrNoCommand           = errors.New("cmdq: poison entry has no stored command")
	ErrNotPoisoned         = errors.New("cmdq: command is not poisoned")
	ErrInvalidContinuation = errors.New("cmdq: invalid continuation token")
	ErrExpired             = errors.New("cmdq: command expired (removed after its retention)")
	ErrNotCancellable      = errors.New("cmdq: command already ended and cannot be cancelled")
	ErrUnknownQueue        = errors.New("cmdq: unknown queue")
)

// Sentinel errors of issuing (documented in package cmdq).
var (
	ErrInvalidType     = errors.New("cmdq: invalid command type")
	ErrInvalidID       = errors.New("cmdq: invalid command ID")
	ErrIDOutsideWindow = errors.New("cmdq: command ID's time is outside the issue window")
	ErrInvalidParams   = errors.New("cmdq: invalid params")
	ErrParamsTooLarge  = errors.New("cmdq: params too large")
	ErrIDConflict      = errors.New("cmdq: command ID already used with different params")
	ErrEnqueueFailed   = errors.New("cmdq: enqueue failed")
	ErrNotAccepted     = errors.New("cmdq: command stored but not accepted (neither enqueued nor marked for the reconciler)")
	ErrInvalidUnique   = errors.New("cmdq: invalid unique key or window")
	ErrInvalidOrderKey = errors.New("cmdq: invalid order key")
	ErrOrderKeyQueue   = errors.New("cmdq: order key used on another queue")
)

// Sentinel errors of registering and running handlers (documented in package cmdq).
var (
	ErrInvalidOptions     = errors.New("cmdq: invalid command options")
	ErrDuplicateType      = errors.New("cmdq: command type already registered")
	ErrInvalidStep        = errors.New("cmdq: invalid step")
	ErrSuperseded         = errors.New("cmdq: attempt superseded: the command finished elsewhere or another delivery took it over")
	ErrCancelled          = errors.New("cmdq: command cancelled")
	ErrOutputTooLarge     = errors.New("cmdq: output too large")
	ErrInvalidOutput      = errors.New("cmdq: output is not JSON-encodable")
	ErrNoHandlers         = errors.New("cmdq: no handlers registered")
	ErrStorageUnavailable = errors.New("cmdq: storage is not answering")
)
