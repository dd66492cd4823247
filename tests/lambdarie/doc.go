// Package lambdarie runs the built Lambda functions (dist/<fn>/bootstrap)
// through the Lambda runtime API: each under the AWS Lambda Runtime
// Interface Emulator, with the environment the synthesized CDK template
// (cdk.out) gives it, against DynamoDB Local and the SQS emulator, fed API
// Gateway (HTTP API payload 2.0), SQS and EventBridge events shaped like
// AWS's (testdata/). `make test-lambda` builds the functions, synthesizes
// the template, installs the pinned emulator and runs the tests; a plain
// `go test ./...` skips them, since it has neither the binaries nor the
// emulator.
package lambdarie
