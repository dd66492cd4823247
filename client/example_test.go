package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/runledger/runledger/client"
)

// A first job: define it, run it, wait for the outcome. New finds the
// local stack `make run` started (.runledger/local.json), or the endpoint
// in RUNLEDGER_API_URL, or the deployed stack RUNLEDGER_STACK names. The
// end-to-end test TestClientFirstJob runs these lines against the local
// stack.
func Example() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.CreateJob(ctx, json.RawMessage(`{"name": "hello", "pool": "demo", "payload": {"sleep": "1s"}}`))
	if err != nil && client.ErrorCode(err) != client.CodeConflict { // conflict: it exists already
		log.Fatal(err)
	}
	run, _, err := c.TriggerRun(ctx, "hello", client.Trigger{})
	if err != nil {
		log.Fatal(err)
	}
	done, err := c.WaitRun(ctx, run.Run.ID, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Run.Status) // SUCCEEDED
}
