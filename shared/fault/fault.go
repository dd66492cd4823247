// Package fault gives runledger's errors a class: what kind of failure an
// error is, so that one table (the protocol package's) maps every error
// the API answers to its HTTP status. It depends on the standard library
// only, so any package, the pure ones included, may use it.
//
// A sentinel is an *Error built once with New: errors.Is finds it through
// any %w wrapping, and ClassOf and Answered read its class and its API
// answer the same way. The clients' errors that decode an API answer are
// Classed too, so a caller on either side of the API tests the same
// classes.
package fault

import (
	"errors"
	"fmt"
)

// Class is the kind of failure an error is. The zero Class is Internal.
type Class uint8

// The classes; each is answered with one HTTP status (protocol's table).
const (
	// Internal: a failure the caller cannot act on but by retrying; the
	// API logs it and answers 500 internal. Every unclassified error is
	// Internal.
	Internal Class = iota
	// Invalid: the request itself is wrong (a name, a field, a body).
	Invalid
	// Forbidden: the caller's credential does not allow the request.
	Forbidden
	// NotFound: the thing named does not exist.
	NotFound
	// Conflict: the state met is not the one the request needs (it
	// exists, it moved on, another caller won).
	Conflict
	// TooLarge: the request or what it would write is over a size limit.
	TooLarge
	// Throttled: a bound on waiting or on the request rate refuses it;
	// trying later may succeed.
	Throttled
	// Unavailable: the answer is not ready yet; try again shortly.
	Unavailable
)

var classNames = [...]string{"internal", "invalid", "forbidden", "not found", "conflict", "too large", "throttled", "unavailable"}

// String names c in words.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Error is an error with a class and, when the API answers it with a
// code of its own, that code and the sentence it answers. Its text
// (Error) is for logs; the message is for the API's clients.
type Error struct {
	class   Class
	text    string
	code    string
	message string
	under   error
}

// New returns a sentinel error of class with text.
func New(class Class, text string) *Error {
	return &Error{class: class, text: text}
}

// Answer returns a copy of e that the API answers with code and message.
func (e *Error) Answer(code, message string) *Error {
	c := *e
	c.code, c.message = code, message
	return &c
}

// Wrapping returns a copy of e that wraps under: its text is followed by
// under's, and errors.Is finds under through it.
func (e *Error) Wrapping(under error) *Error {
	c := *e
	c.under = under
	return &c
}

// Error is the text for logs.
func (e *Error) Error() string {
	if e.under != nil {
		return e.text + ": " + e.under.Error()
	}
	return e.text
}

// Unwrap is the error e wraps, if any.
func (e *Error) Unwrap() error { return e.under }

// Class is e's class.
func (e *Error) Class() Class { return e.class }

// Code is the API's code for e ("not_found"), or "" when the API does not
// answer e with one of its own.
func (e *Error) Code() string { return e.code }

// Message is the sentence the API answers e with, or "" with no code.
func (e *Error) Message() string { return e.message }

// Classed is an error that knows its class: an *Error, or an API answer
// a client decoded (its code's class).
type Classed interface {
	error
	Class() Class
}

// ClassOf is the class of the first Classed error in err's chain,
// Internal when there is none (nil included).
func ClassOf(err error) Class {
	var c Classed
	if errors.As(err, &c) {
		return c.Class()
	}
	return Internal
}

// Answered is the first *Error in err's chain that carries an API code,
// in the order errors.As walks it; ok is false when none does.
func Answered(err error) (e *Error, ok bool) {
	if f, is := err.(*Error); is && f.code != "" {
		return f, true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, inner := range u.Unwrap() {
			if e, ok := Answered(inner); ok {
				return e, true
			}
		}
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return Answered(inner)
		}
	}
	return nil, false
}
