package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
)

// itemSize computes an item's size by DynamoDB's documented rules
// (developerguide/CapacityUnitCalculations.html):
//
//   - string: UTF-8 bytes of the attribute name + UTF-8 bytes of the value;
//   - number: name + 1 byte per two significant digits + 1 byte (exactly:
//     see numberSize);
//   - binary: name + raw bytes;
//   - boolean, null: name + 1 byte;
//   - list, map: name + 3 bytes + the nested elements' sizes (map keys count
//     as names) + 1 byte per element;
//   - sets: name + the elements' sizes.
//
// Absent (nil) attributes count nothing.
func itemSize(it map[string]types.AttributeValue) int {
	total := 0
	for name, v := range it {
		if v == nil {
			continue
		}
		total += len(name) + valueSize(v)
	}
	return total
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += 1 + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += 1 + len(k) + valueSize(e)
		}
		return n
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += numberSize(e)
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	}
	return 0
}

// numberSize is a number's stored size. DynamoDB documents it as
// "approximately 1 byte per two significant digits, plus 1"; exactly, the
// digits are stored in base-100 pairs aligned at the decimal point (1.1 is
// the two pairs 01.10), leading and trailing zero pairs dropped, plus one
// byte, plus a terminator byte for a negative number. The store counts it
// exactly; TestItemSizeMatchesDynamoDB checks it against the endpoint.
func numberSize(s string) int {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	exp := 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			return 21 // not a number DynamoDB accepts; the most a number takes
		}
		exp, s = e, s[:i]
	}
	intDigits := len(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		intDigits = i
		s = s[:i] + s[i+1:]
	}
	// Digit i has the power of ten intDigits-1-i+exp; its pair is that
	// power floor-divided by 2.
	lo, hi, found := 0, 0, false
	for i := 0; i < len(s); i++ {
		if s[i] == '0' {
			continue
		}
		p := floorDiv2(intDigits - 1 - i + exp)
		if !found {
			hi, found = p, true
		}
		lo = p
	}
	if !found {
		return 1 // zero
	}
	n := hi - lo + 1 + 1
	if neg {
		n++
	}
	return n
}

func floorDiv2(n int) int {
	if n < 0 {
		return -((-n + 1) / 2)
	}
	return n / 2
}

// checkSize refuses an item over MaxItemSize before anything is written.
func checkSize(what string, it map[string]types.AttributeValue) (int, error) {
	n := itemSize(it)
	if n > ledger.MaxItemSize {
		return n, &ledger.ItemTooLargeError{Item: what, Size: n, Limit: ledger.MaxItemSize}
	}
	return n, nil
}

// checkTransaction refuses a transaction whose items together exceed
// MaxTransactionSize.
func checkTransaction(what string, sizes []int) error {
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total > ledger.MaxTransactionSize {
		return &ledger.ItemTooLargeError{Item: fmt.Sprintf("transaction %s (%d items)", what, len(sizes)), Size: total, Limit: ledger.MaxTransactionSize}
	}
	return nil
}

// writeUnits is what writing items of these sizes costs by DynamoDB's
// pricing rules: WriteUnits per item, twice in a transaction. Secondary
// index writes come on top (see CapacityReport).
func writeUnits(sizes []int, transactional bool) float64 {
	per := 1.0
	if transactional {
		per = 2
	}
	total := 0.0
	for _, n := range sizes {
		total += per * WriteUnits(n)
	}
	return total
}

// WriteUnits is what one write of an item, or of an index entry, of size
// bytes costs outside a transaction by DynamoDB's pricing rules: 1 WCU per
// started KB, at least 1. The store's capacity reports count by it, and so
// does the bench's heat model.
func WriteUnits(size int) float64 { return float64(max(1, (size+1023)/1024)) }

// ItemSize is an item's size by DynamoDB's documented rules, as the store
// counts it for its capacity reports (the bench's heat model uses it).
func ItemSize(it map[string]types.AttributeValue) int { return itemSize(it) }
