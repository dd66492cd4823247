// Package fieldtemplate renders the Go templates a definition or a payload
// holds (a limiter key, an on_event param, a map's over, worker exec's
// arguments) within bounds, so a template cannot spend more time or memory
// than its field is worth. A template is parsed with missingkey=error and
// these functions: json, and bounded versions of printf, print, println,
// html, js and urlquery.
//
// The bounds of one rendering: the output goes to a writer that refuses to
// grow past the field's cap, which stops the execution there; the strings
// the functions make add up to at most four times the cap (nested calls,
// or results made and dropped in a loop); printf refuses widths that would
// pad past the cap before fmt builds the string; {{define}} and
// {{template}} are refused (a template calling itself grows exponentially
// without writing). A Budget adds bounds shared by the several fields of
// one payload: their output together, what their functions make together,
// and MaxRangeSteps range iterations in all.
package fieldtemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/runledger/runledger/shared/fault"
)

// MaxRangeSteps bounds the iterations of every {{range}} of the fields of
// one Budget together: a loop that writes nothing is bounded too.
const MaxRangeSteps = 100_000

// madePerByte is how many bytes the functions may make for each byte a
// field (or a budget) may render.
const madePerByte = 4

// ErrTooLarge is the error of a rendering stopped at a cap on its output.
var ErrTooLarge = fault.New(fault.TooLarge, "renders too much")

// boundError is a refusal by one of the bounds, its text saying which;
// one by a cap on the output wraps ErrTooLarge.
type boundError struct {
	msg string
	err error
}

func (e *boundError) Error() string { return e.msg }
func (e *boundError) Unwrap() error { return e.err }

func tooLarge(msg string) error { return &boundError{msg: msg, err: ErrTooLarge} }

// stepFunc is the function counting range iterations; parsing inserts a
// call to it at the start of every range body.
const stepFunc = "runledger_range_step"

// shared ends the error of a bound that earlier fields of the budget have
// drawn on: the field alone may be within its own.
const shared = " with the fields before it"

// Budget is what the fields of one payload may spend together. It is not
// safe for concurrent use: one rendering of a payload's fields owns it.
type Budget struct {
	total int // bytes of output it was made with
	bytes int // bytes of output left
	made  int // bytes the functions may still make
	steps int // range iterations left
}

// NewBudget is a budget of total bytes of output.
func NewBudget(total int) *Budget {
	return &Budget{total: total, bytes: total, made: madePerByte * total, steps: MaxRangeSteps}
}

// Render renders one field alone, within max bytes.
func Render(name, text string, data any, max int) (string, error) {
	return NewBudget(max).Render(name, text, data, max)
}

// Check parses text as Render does and refuses what Render would refuse
// before running it: a syntax error, an unknown function, {{define}} or
// {{template}}. Definitions check their templates with it when written.
func Check(name, text string) error {
	_, err := Parse(name, text)
	return err
}

// Render renders the field name's text over data within max bytes and
// what is left of b. Its error says which bound stopped it; one over a
// cap on the output wraps ErrTooLarge.
func (b *Budget) Render(name, text string, data any, max int) (string, error) {
	t, err := Parse(name, text)
	if err != nil {
		return "", err
	}
	return b.RenderTemplate(t, data, max)
}

// Template is a field's text parsed once, for a field rendered again and
// again (a limiter key, for each run of its job). Each rendering starts
// with bounds of its own, so renderings may run concurrently: the parsed
// tree is only read, and the functions that count what a rendering
// spends are bound to it alone (RenderTemplate).
type Template struct {
	text string
	// t is nil for a text without actions, which is written as it is.
	t *template.Template
}

// Parse parses text as Render would and refuses what Render would refuse
// before running it (see Check).
func Parse(name, text string) (*Template, error) {
	if !strings.Contains(text, "{{") {
		return &Template{text: text}, nil
	}
	// The functions bound at parse time only let the parser know their
	// names; each rendering binds its own.
	t, err := (&field{b: NewBudget(0)}).parse(name, text)
	if err != nil {
		return nil, err
	}
	return &Template{text: text, t: t}, nil
}

// Render renders t alone, within max bytes.
func (t *Template) Render(data any, max int) (string, error) {
	return NewBudget(max).RenderTemplate(t, data, max)
}

// RenderTemplate is Render with a template parsed before.
func (b *Budget) RenderTemplate(pt *Template, data any, max int) (string, error) {
	f := &field{b: b, max: max, stepsDrawn: b.steps < MaxRangeSteps}
	if pt.t == nil {
		if _, err := f.Write([]byte(pt.text)); err != nil {
			return "", err
		}
		return f.out.String(), nil
	}
	// A clone shares the parsed tree and has a function map of its own,
	// where this rendering's functions replace the parse-time ones.
	t, err := pt.t.Clone()
	if err != nil {
		return "", err
	}
	if err := t.Funcs(f.funcs()).Execute(f, data); err != nil {
		return "", unwrapExec(err)
	}
	return f.out.String(), nil
}

// unwrapExec gives a bound's own error rather than text/template's
// wrapping of it, so a stopped field says what stopped it, once.
func unwrapExec(err error) error {
	var bound *boundError
	if errors.As(err, &bound) {
		return bound
	}
	return err
}

// field is one rendering: its output and what it has drawn.
type field struct {
	b    *Budget
	max  int
	out  strings.Builder
	made int
	// stepsDrawn: earlier fields of the budget ran range steps.
	stepsDrawn bool
}

// Write keeps what is written up to the field's cap and the budget's, and
// fails a write past either, which ends the template's execution.
func (f *field) Write(p []byte) (int, error) {
	if f.out.Len()+len(p) > f.max {
		return 0, tooLarge("renders over " + size(f.max))
	}
	if len(p) > f.b.bytes {
		return 0, tooLarge("renders over " + size(f.b.total) + shared)
	}
	f.b.bytes -= len(p)
	return f.out.Write(p)
}

// spend counts a string a function made against the field's share and the
// budget's; a string longer than the field's cap could never be written.
func (f *field) spend(s string) (string, error) {
	f.made += len(s)
	f.b.made -= len(s)
	switch {
	case len(s) > f.max:
		return "", tooLarge("renders over " + size(f.max))
	case f.made > madePerByte*f.max:
		return "", &boundError{msg: fmt.Sprintf("its functions make more than %s of text", size(madePerByte*f.max))}
	case f.b.made < 0:
		return "", &boundError{msg: fmt.Sprintf("its functions make more than %s of text%s", size(madePerByte*f.b.total), shared)}
	}
	return s, nil
}

func (f *field) step() (string, error) {
	if f.b.steps--; f.b.steps < 0 {
		msg := fmt.Sprintf("range loops more than %d times", MaxRangeSteps)
		if f.stepsDrawn {
			msg += shared
		}
		return "", &boundError{msg: msg}
	}
	return "", nil
}

func (f *field) funcs() template.FuncMap {
	return template.FuncMap{
		"printf": func(format string, a ...any) (string, error) {
			if err := checkWidths(format, f.max); err != nil {
				return "", err
			}
			return f.spend(fmt.Sprintf(format, a...))
		},
		"print":    func(a ...any) (string, error) { return f.spend(fmt.Sprint(a...)) },
		"println":  func(a ...any) (string, error) { return f.spend(fmt.Sprintln(a...)) },
		"html":     func(a ...any) (string, error) { return f.spend(template.HTMLEscaper(a...)) },
		"js":       func(a ...any) (string, error) { return f.spend(template.JSEscaper(a...)) },
		"urlquery": func(a ...any) (string, error) { return f.spend(template.URLQueryEscaper(a...)) },
		"json": func(a any) (string, error) {
			b, err := json.Marshal(a)
			if err != nil {
				return "", err
			}
			return f.spend(string(b))
		},
		stepFunc: f.step,
	}
}

// parse parses text with f's functions, refuses {{define}} and
// {{template}}, and puts a step count at the start of every range body.
func (f *field) parse(name, text string) (*template.Template, error) {
	funcs := f.funcs()
	t, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return nil, err
	}
	for _, d := range t.Templates() {
		if d.Name() != t.Name() {
			return nil, fmt.Errorf("defines template %q: a field is one template", d.Name())
		}
	}
	if t.Tree == nil {
		return t, nil
	}
	step, err := template.New("step").Funcs(funcs).Parse("{{" + stepFunc + "}}")
	if err != nil {
		return nil, err
	}
	if err := countSteps(t.Tree.Root, step.Tree.Root.Nodes[0]); err != nil {
		return nil, err
	}
	return t, nil
}

func countSteps(n parse.Node, step parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := countSteps(c, step); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return fmt.Errorf("calls template %q: a field is one template", n.Name)
	case *parse.RangeNode:
		if n.List != nil {
			n.List.Nodes = append([]parse.Node{step}, n.List.Nodes...)
		}
		return branches(&n.BranchNode, step)
	case *parse.IfNode:
		return branches(&n.BranchNode, step)
	case *parse.WithNode:
		return branches(&n.BranchNode, step)
	}
	return nil
}

func branches(b *parse.BranchNode, step parse.Node) error {
	if err := countSteps(b.List, step); err != nil {
		return err
	}
	return countSteps(b.ElseList, step)
}

// checkWidths adds up the numbers of format's verbs (widths, precisions,
// argument indexes) and refuses a total over max, or a width taken from
// an argument (*): fmt pads a width in memory before the result can be
// checked.
func checkWidths(format string, max int) error {
	total := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
	verb:
		for i++; i < len(format); i++ {
			switch c := format[i]; {
			case c == '*':
				return &boundError{msg: "printf: a width or precision from an argument (*) is not allowed"}
			case c >= '0' && c <= '9':
				n := 0
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					if n = n*10 + int(format[i]-'0'); n > max {
						return &boundError{msg: "printf: a width or precision over " + size(max)}
					}
				}
				total += n
				i--
			case strings.IndexByte("+-# .[]", c) >= 0:
			default:
				break verb // the verb, or a second % (an escaped one)
			}
		}
	}
	if total > max {
		return &boundError{msg: "printf: widths add up to more than " + size(max)}
	}
	return nil
}

// size says n bytes as the limits are written: "256 bytes", "64 KiB",
// "1 MiB".
func size(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
