package execworker

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"
)

// MaxFieldBytes bounds what one field of a payload (an argument, an env
// value, dir) may render to.
const MaxFieldBytes = 128 << 10

// MaxRangeSteps bounds the iterations of every {{range}} of one field
// together: a loop that writes nothing is bounded too.
const MaxRangeSteps = 100_000

// ErrFieldTooLarge is the error of a field that renders over MaxFieldBytes.
var ErrFieldTooLarge = fmt.Errorf("renders over %d KiB", MaxFieldBytes>>10)

// stepFunc is the function counting range iterations; render inserts a
// call to it at the start of every range body.
const stepFunc = "runledger_range_step"

// maxMadeBytes bounds the strings the template's functions make for one
// field, all together: nested calls (js of js of ...) or results made and
// dropped in a loop cannot add up past it.
const maxMadeBytes = 4 * MaxFieldBytes

// render expands text with v, within MaxFieldBytes and MaxRangeSteps: the
// output goes to a writer that refuses to grow past the cap (which aborts
// the execution), the functions that make strings (printf, print, println,
// html, js, urlquery) share a budget and printf refuses widths that would
// build a larger string before writing it, and {{template}} (recursion) is
// refused.
func render(field, text string, v Vars) (string, error) {
	if !strings.Contains(text, "{{") {
		if len(text) > MaxFieldBytes {
			return "", fmt.Errorf("%s: %w", field, ErrFieldTooLarge)
		}
		return text, nil
	}
	steps, made := 0, 0
	spend := func(s string) (string, error) {
		if made += len(s); len(s) > MaxFieldBytes {
			return "", ErrFieldTooLarge
		} else if made > maxMadeBytes {
			return "", fmt.Errorf("its functions make more than %d KiB of text", maxMadeBytes>>10)
		}
		return s, nil
	}
	funcs := template.FuncMap{
		"printf": func(format string, a ...any) (string, error) {
			if err := checkWidths(format); err != nil {
				return "", err
			}
			return spend(fmt.Sprintf(format, a...))
		},
		"print":    func(a ...any) (string, error) { return spend(fmt.Sprint(a...)) },
		"println":  func(a ...any) (string, error) { return spend(fmt.Sprintln(a...)) },
		"html":     func(a ...any) (string, error) { return spend(template.HTMLEscaper(a...)) },
		"js":       func(a ...any) (string, error) { return spend(template.JSEscaper(a...)) },
		"urlquery": func(a ...any) (string, error) { return spend(template.URLQueryEscaper(a...)) },
		"json": func(a any) (string, error) {
			b, err := json.Marshal(a)
			if err != nil {
				return "", err
			}
			return spend(string(b))
		},
		stepFunc: func() (string, error) {
			if steps++; steps > MaxRangeSteps {
				return "", fmt.Errorf("range loops more than %d times", MaxRangeSteps)
			}
			return "", nil
		},
	}
	t, err := template.New(field).Option("missingkey=error").Funcs(funcs).Parse(text)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if err := bound(t, funcs); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	w := &limitedWriter{max: MaxFieldBytes}
	if err := t.Execute(w, v); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return w.b.String(), nil
}

// bound refuses {{template}} and {{define}} (one field is one template,
// and a template calling itself grows exponentially without writing), and
// puts a step count at the start of every range body.
func bound(t *template.Template, funcs template.FuncMap) error {
	for _, d := range t.Templates() {
		if d.Name() != t.Name() {
			return fmt.Errorf("defines template %q: a field is one template", d.Name())
		}
	}
	if t.Tree == nil {
		return nil
	}
	step, err := template.New("step").Funcs(funcs).Parse("{{" + stepFunc + "}}")
	if err != nil {
		return err
	}
	return countSteps(t.Tree.Root, step.Tree.Root.Nodes[0])
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

// limitedWriter keeps what is written up to max bytes and fails a write
// past it, which ends the template's execution.
type limitedWriter struct {
	b   strings.Builder
	max int
}

func (w *limitedWriter) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.max {
		return 0, ErrFieldTooLarge
	}
	return w.b.Write(p)
}

// checkWidths adds up the numbers of format's verbs (widths, precisions,
// argument indexes) and refuses a total over MaxFieldBytes, or a width
// taken from an argument (*): fmt pads a width in memory before the
// result can be checked.
func checkWidths(format string) error {
	total := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
	verb:
		for i++; i < len(format); i++ {
			switch c := format[i]; {
			case c == '*':
				return errors.New("printf: a width or precision from an argument (*) is not allowed")
			case c >= '0' && c <= '9':
				n := 0
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					if n = n*10 + int(format[i]-'0'); n > MaxFieldBytes {
						return fmt.Errorf("printf: a width or precision over %d KiB", MaxFieldBytes>>10)
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
	if total > MaxFieldBytes {
		return fmt.Errorf("printf: widths add up to more than %d KiB", MaxFieldBytes>>10)
	}
	return nil
}
