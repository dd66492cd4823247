package execworker

import (
	"fmt"

	"github.com/runledger/runledger/shared/fieldtemplate"
)

// MaxFieldBytes bounds what one field of a payload (an argument, an env
// value, dir) may render to.
const MaxFieldBytes = 128 << 10

// MaxRenderedBytes bounds what the fields of one payload render to
// together: each under MaxFieldBytes, thousands of them would still add up
// to hundreds of MiB before the process could be refused.
const MaxRenderedBytes = 1 << 20

// render expands one field's text with v within MaxFieldBytes and what is
// left of the payload's budget (fieldtemplate says how both are bounded).
func render(b *fieldtemplate.Budget, field, text string, v Vars) (string, error) {
	s, err := b.Render(field, text, v, MaxFieldBytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return s, nil
}
