// Command rlshape prints the code's shape figures (tests/repo/shape): go
// run ./tests/repo/cmd/rlshape [root].
package main

import (
	"fmt"
	"os"

	"github.com/runledger/runledger/tests/repo/shape"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	f, err := shape.Measure(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlshape:", err)
		os.Exit(1)
	}
	fmt.Print(f)
}
