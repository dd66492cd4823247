package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/fault"
)

var (
	errGone   = fault.New(fault.NotFound, "not found").Answer("not_found", "The resource does not exist.")
	errMoved  = fault.New(fault.Conflict, "conflict")
	errBase   = errors.New("illegal transition")
	errOnBase = fault.New(fault.Conflict, "inputs too large").Wrapping(errBase).Answer("illegal_transition", "Too large.")
)

func TestClassAndAnswerReadThroughWrapping(t *testing.T) {
	err := fmt.Errorf("run r: %w", fmt.Errorf("task t: %w", errGone))
	if !errors.Is(err, errGone) || fault.ClassOf(err) != fault.NotFound {
		t.Fatalf("Is %v, class %v", errors.Is(err, errGone), fault.ClassOf(err))
	}
	e, ok := fault.Answered(err)
	if !ok || e.Code() != "not_found" || e.Message() != "The resource does not exist." || err.Error() != "run r: task t: not found" {
		t.Fatalf("answered %v %v, text %q", e, ok, err.Error())
	}
}

func TestAClassWithoutACodeIsNotAnswered(t *testing.T) {
	err := fmt.Errorf("write: %w", errMoved)
	if _, ok := fault.Answered(err); ok || fault.ClassOf(err) != fault.Conflict {
		t.Fatalf("answered %v, class %v", ok, fault.ClassOf(err))
	}
	if fault.ClassOf(errors.New("plain")) != fault.Internal || fault.ClassOf(nil) != fault.Internal {
		t.Fatal("an unclassified error is not Internal")
	}
}

func TestAnsweredFindsTheFirstCodeAcrossJoins(t *testing.T) {
	err := fmt.Errorf("%w: %w", errMoved, fmt.Errorf("x: %w", errGone))
	if e, ok := fault.Answered(err); !ok || e != errGone {
		t.Fatalf("answered %v %v, want the not found sentinel", e, ok)
	}
}

func TestWrappingKeepsTheWrappedSentinel(t *testing.T) {
	if !errors.Is(errOnBase, errBase) || errOnBase.Error() != "inputs too large: illegal transition" {
		t.Fatalf("Is %v, text %q", errors.Is(errOnBase, errBase), errOnBase.Error())
	}
	if e, _ := fault.Answered(fmt.Errorf("claim: %w", errOnBase)); e != errOnBase {
		t.Fatalf("answered %v, want the outer sentinel", e)
	}
}

func TestClassNames(t *testing.T) {
	if fault.TooLarge.String() != "too large" || fault.Class(99).String() != "class(99)" {
		t.Fatalf("%s %s", fault.TooLarge, fault.Class(99))
	}
}

// decoded is an answer a client decoded: Classed without being an *Error.
type decoded struct{ code string }

func (d *decoded) Error() string      { return d.code }
func (d *decoded) Class() fault.Class { return fault.NotFound }

func TestClassOfReadsAnyClassedError(t *testing.T) {
	if c := fault.ClassOf(fmt.Errorf("get run r: %w", &decoded{"not_found"})); c != fault.NotFound {
		t.Fatalf("class %v, want not found", c)
	}
}
