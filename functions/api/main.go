// Command api is the HTTP API Lambda (API Gateway HTTP API, payload 2.0):
// the shared http.Handler behind the gateway adapter (shared/gateway),
// which routes what the gateway routed. Wiring only: the graph comes from
// the composition root (shared/app).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/gateway"
)

func main() {
	a, log, err := app.Boot(context.Background())
	if err != nil {
		log.Error("configure", "error", err.Error())
		os.Exit(1)
	}
	h, err := a.HTTP()
	if err != nil {
		log.Error("configure API", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(gateway.New(h).ProxyWithContext)
}
