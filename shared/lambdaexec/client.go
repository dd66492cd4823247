package lambdaexec

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

// API is the part of the AWS SDK's Lambda client that Client uses.
type API interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, optFns ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

// Client invokes functions through the AWS SDK.
type Client struct{ API API }

var _ Invoker = Client{}

// InvokeAsync calls Invoke with InvocationType Event: Lambda queues the
// event and answers 202 at once, with the request id in the answer's
// metadata.
func (c Client) InvokeAsync(ctx context.Context, function string, payload []byte) (string, error) {
	out, err := c.API.Invoke(ctx, &lambda.InvokeInput{
		FunctionName:   aws.String(function),
		InvocationType: types.InvocationTypeEvent,
		Payload:        payload,
	})
	if err != nil {
		return "", err
	}
	if out.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("asynchronous invoke answered status %d, not 202", out.StatusCode)
	}
	id, ok := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata)
	if !ok || id == "" {
		return "", errors.New("asynchronous invoke answered no request id")
	}
	return id, nil
}
