// Command gendiagram writes docs/state-machine.md from the transition table.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/runledger/runledger/statemodel"
)

func main() {
	out := flag.String("o", "docs/state-machine.md", "output file")
	flag.Parse()
	if err := os.WriteFile(*out, []byte(statemodel.Mermaid()), 0o644); err != nil {
		log.Fatalf("write %s: %v", *out, err)
	}
}
