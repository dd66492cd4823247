package fieldtemplate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/fieldtemplate"
)

// One field alone: its cap bounds the output as it is written, the strings
// its functions make, and printf's widths; the error is the bound's own
// sentence.
func TestRenderField(t *testing.T) {
	t.Parallel()
	data := map[string]any{"Name": "abc"}
	for text, want := range map[string]string{
		`{{range 1000}}{{.}}{{end}}`:                         "renders over 1 KiB",
		strings.Repeat("x", 1025):                            "renders over 1 KiB",
		`{{printf "%01025d" 1}}`:                             "printf: a width or precision over 1 KiB",
		`{{printf "%0600d%0600d" 1 2}}`:                      "printf: widths add up to more than 1 KiB",
		`{{printf "%*d" 5 1}}`:                               "(*)",
		`{{range 5}}{{if printf "%01000d" 1}}{{end}}{{end}}`: "its functions make more than 4 KiB of text",
		`{{range 100001}}{{end}}`:                            "range loops more than 100000 times",
		`{{define "a"}}{{end}}`:                              `defines template "a": a field is one template`,
		`{{template "f"}}`:                                   `calls template "f": a field is one template`,
		`{{block "b" .}}{{end}}`:                             "a field is one template",
		`{{.Missing}}`:                                       `map has no entry for key "Missing"`,
	} {
		_, err := fieldtemplate.Render("f", text, data, 1<<10)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60s: err = %v, want one saying %q", text, err, want)
		}
		if strings.Contains(want, "renders over") && !errors.Is(err, fieldtemplate.ErrTooLarge) {
			t.Errorf("%.60s: %v does not wrap ErrTooLarge", text, err)
		} else if !strings.Contains(want, "renders over") && errors.Is(err, fieldtemplate.ErrTooLarge) {
			t.Errorf("%.60s: %v wraps ErrTooLarge", text, err)
		}
	}
	for text, want := range map[string]string{
		`{{.Name}}-{{json .Name}}`:                 `abc-"abc"`,
		`{{printf "%5s|%-3d|%%" .Name 7}}`:         "  abc|7  |%",
		strings.Repeat("y", 1024):                  strings.Repeat("y", 1024),
		`{{range 2}}{{$.Name}}{{end}}{{html "<"}}`: "abcabc&lt;",
	} {
		if got, err := fieldtemplate.Render("f", text, data, 1<<10); err != nil || got != want {
			t.Errorf("%.60s = %q, %v; want %q", text, got, err, want)
		}
	}
}

// The fields of one budget share its output, the strings their functions
// make and the range steps; a field stopped by what the others drew says
// so.
func TestBudgetShared(t *testing.T) {
	t.Parallel()
	b := fieldtemplate.NewBudget(1 << 10)
	if _, err := b.Render("a", strings.Repeat("x", 600), nil, 1<<10); err != nil {
		t.Fatal(err)
	}
	_, err := b.Render("b", strings.Repeat("x", 600), nil, 1<<10)
	if want := "renders over 1 KiB with the fields before it"; err == nil || err.Error() != want || !errors.Is(err, fieldtemplate.ErrTooLarge) {
		t.Errorf("a second field of 600 bytes: err = %v, want %q", err, want)
	}

	b = fieldtemplate.NewBudget(1 << 10)
	made := `{{range 3}}{{if printf "%01000d" 1}}{{end}}{{end}}` // 3,000 made bytes each
	if _, err := b.Render("a", made, nil, 1<<10); err != nil {
		t.Fatal(err)
	}
	_, err = b.Render("b", made, nil, 1<<10)
	if want := "its functions make more than 4 KiB of text with the fields before it"; err == nil || err.Error() != want {
		t.Errorf("made strings past the budget: err = %v, want %q", err, want)
	}

	b = fieldtemplate.NewBudget(1 << 20)
	if _, err := b.Render("a", `{{range 60000}}{{end}}`, nil, 1<<10); err != nil {
		t.Fatal(err)
	}
	_, err = b.Render("b", `{{range 60000}}{{end}}`, nil, 1<<10)
	if want := "range loops more than 100000 times with the fields before it"; err == nil || err.Error() != want {
		t.Errorf("steps past the budget: err = %v, want %q", err, want)
	}
}

// Check refuses when a definition is written what Render would refuse
// before running.
func TestCheck(t *testing.T) {
	t.Parallel()
	for text, ok := range map[string]bool{
		`{{json .Params}}-{{printf "%d" 1}}`: true,
		`plain`:                              true,
		`{{.Params`:                          false,
		`{{nosuchfunc 1}}`:                   false,
		`{{define "x"}}{{end}}`:              false,
		`{{template "x"}}`:                   false,
		`{{range .}}{{template "y"}}{{end}}`: false,
	} {
		if err := fieldtemplate.Check("key", text); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok %v", text, err, ok)
		}
	}
}

// A template parsed once is rendered with fresh bounds each time: two
// renderings that each loop 60,000 times pass where one budget's 100,000
// steps would stop the second, a rendering's output cap is its own, and
// renderings running at once do not draw on each other.
func TestTemplateRendersWithFreshBounds(t *testing.T) {
	t.Parallel()
	loop, err := fieldtemplate.Parse("f", `{{range 60000}}{{end}}{{.}}`)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got, err := loop.Render("ok", 1<<10); err != nil || got != "ok" {
			t.Fatalf("rendering %d = %q, %v; want %q", i+1, got, err, "ok")
		}
	}
	if _, err := loop.Render(strings.Repeat("x", 11), 10); !errors.Is(err, fieldtemplate.ErrTooLarge) {
		t.Errorf("11 bytes within 10: err = %v, want ErrTooLarge", err)
	}
	plain, err := fieldtemplate.Parse("f", "plain")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := plain.Render(nil, 5); err != nil || got != "plain" {
		t.Errorf("plain = %q, %v", got, err)
	}

	errs := make(chan error, 8)
	for range cap(errs) {
		go func() {
			_, err := loop.Render("ok", 1<<10)
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("concurrent rendering: %v", err)
		}
	}
}
