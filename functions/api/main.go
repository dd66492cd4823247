// Command api is the HTTP API Lambda (API Gateway HTTP API, payload 2.0):
// the shared http.Handler behind the v2 proxy adapter. Wiring only.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/runledger/runledger/shared/api"
	"github.com/runledger/runledger/shared/scheduler"
)

func main() {
	svc, log, err := scheduler.Boot(context.Background())
	if err != nil {
		log.Error("configure", "error", err.Error())
		os.Exit(1)
	}
	h, err := api.New(svc, api.Config{Auth: api.Auth(os.Getenv("RUNLEDGER_AUTH")), APIKey: os.Getenv("RUNLEDGER_API_KEY"), Logger: log})
	if err != nil {
		log.Error("configure API", "error", err.Error())
		os.Exit(1)
	}
	lambda.Start(httpadapter.NewV2(h).ProxyWithContext)
}
