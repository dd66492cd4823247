package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/localinfo"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

// load is a handler: it reads its payload, does the work while ctx lives,
// and records where the output went.
func load(ctx context.Context, t worker.Task) error {
	var p struct {
		Table string `json:"table"`
	}
	if err := t.DecodePayload(&p); err != nil || p.Table == "" {
		// Retrying cannot fix a bad payload.
		return worker.Permanent(worker.WithCategory(fmt.Errorf("payload needs a table: %v", err), "invalid_payload"))
	}
	day := t.LogicalTime.UTC().Format(time.DateOnly) // the schedule slot, not the wall clock
	t.Log.InfoContext(ctx, "loading", "table", p.Table, "day", day)
	select {
	case <-ctx.Done(): // cancelled, timed out, superseded, shutting down or lease lost
		return ctx.Err()
	case <-time.After(2 * time.Second): // the work
	}
	return t.SetOutputRef(fmt.Sprintf("s3://warehouse/%s/%s/%s/%d", p.Table, day, t.Run, t.Attempt))
}

// A long-running worker of the pool "etl", joining the local stack that
// `make run` started (its endpoints are in .runledger/local.json; the SQS
// emulator takes any credentials). Against AWS, use the default
// configuration and the queue URLs of the stack's PoolQueueUrls and
// EventsQueueUrl outputs. Run returns when ctx ends, after running
// handlers finished (Config.ShutdownGrace).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	path, err := localinfo.Find(".")
	if err != nil {
		log.Fatal(err)
	}
	info, err := localinfo.Read(path)
	if err != nil {
		log.Fatal(err)
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(info.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	if err != nil {
		log.Fatal(err)
	}
	sqsClient := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(info.SQSEndpoint) })
	w, err := worker.New(worker.Config{
		APIURL:         info.APIURL,
		PoolQueueURL:   info.Queues["etl"],
		EventsQueueURL: info.Queues["events"],
		Name:           "etl", // unique among live workers; the claim says "etl@<boot id>"
		Concurrency:    4,
		Queue:          queue.New(sqsClient),
	}, load)
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// The same handler as a Lambda function on the pool's dispatch queue (an
// SQS event source mapping with ReportBatchItemFailures). Build the worker
// once per execution environment, in main, never per invocation.
func ExampleWorker_HandleSQS() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(worker.Config{
		APIURL:          os.Getenv("RUNLEDGER_API_URL"),
		EventsQueueURL:  os.Getenv("RUNLEDGER_EVENTS_QUEUE_URL"),
		Name:            os.Getenv("AWS_LAMBDA_FUNCTION_NAME") + "/" + os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME"),
		Concurrency:     10,
		Queue:           queue.New(sqs.NewFromConfig(cfg)),
		DeadlineReserve: 10 * time.Second, // handlers stop this long before the invocation's deadline
	}, load)
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(w.HandleSQS)
}

// Errors tell the worker how to report a failure: retry or not, the
// error_category, the exit code and the reason an operator reads in the
// task's history.
func ExamplePermanent() {
	err := errors.New("table sales does not exist")
	err = worker.WithCategory(err, "missing_table") // snake_case, at most 64 characters
	err = worker.WithExitCode(err, 2)
	err = worker.Permanent(err) // no retry: the next attempt would fail the same way
	code, _ := worker.ExitCode(err)
	fmt.Println(worker.IsPermanent(err), worker.Category(err), code)
	fmt.Println(worker.Reason(err))
	fmt.Println(worker.Reason(worker.WithReason(err, "ERROR: relation \"sales\" does not exist")))
	// Output:
	// true missing_table 2
	// table sales does not exist
	// ERROR: relation "sales" does not exist
}

// A handler learns why its ctx ended from its cause. After ErrLeaseLost
// the worker reports nothing and a retry may start soon: write nothing
// more. After a cancel request, return ctx.Err() and the worker
// acknowledges the cancel.
func ExampleErrLeaseLost() {
	handler := func(ctx context.Context, t worker.Task) error {
		for batch := 0; ; batch++ {
			select {
			case <-ctx.Done():
				if errors.Is(context.Cause(ctx), worker.ErrLeaseLost) {
					t.Log.WarnContext(ctx, "lease lost: stopping without writing", "batch", batch)
				}
				return ctx.Err()
			default:
			}
			if batch == 100 {
				return nil
			}
			// ... process one batch ...
		}
	}
	_ = handler
}

// outputs stands for where a task writes its output: any store with a
// conditional write (a DynamoDB ConditionExpression, an S3 conditional
// put, a SQL UPDATE ... WHERE).
type outputs interface {
	// PutIfNewer writes value under key unless the stored attempt is
	// newer than attempt or now is past notAfter, in one conditional
	// write; it answers false when the condition refused it.
	PutIfNewer(ctx context.Context, key string, attempt int, token string, notAfter time.Time, value []byte) (bool, error)
}

// Output writes fenced by the attempt: the key is the task's, the write
// carries the attempt number and token and is refused for an older attempt
// or after the fencing deadline, so an attempt that still runs after it was
// given up cannot overwrite what its retry wrote.
func ExampleTask_FencingDeadline() {
	var store outputs // your store
	handler := func(ctx context.Context, t worker.Task) error {
		result := []byte(`{"rows": 1204}`)
		if time.Now().After(t.FencingDeadline()) {
			return ctx.Err() // too late: the worker is about to stop this attempt
		}
		ok, err := store.PutIfNewer(ctx, t.Run+"/"+t.Task, t.Attempt, t.Token, t.FencingDeadline(), result)
		if err != nil {
			return err
		}
		if !ok {
			return worker.Permanent(worker.WithCategory(errors.New("a newer attempt wrote the output"), "superseded"))
		}
		return t.SetOutputRef("outputs://" + t.Run + "/" + t.Task)
	}
	_ = handler
}

// Exactly-once effects: the attempt's fence goes first in the handler's
// own TransactWriteItems, beside its output row, keyed on the run and task
// and written only if absent. The row lands only while this attempt owns
// its task; a retry that finds its predecessor's row (its own condition
// failed, not the fence) has nothing left to do.
func ExampleTask_Fence() {
	awsCfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(awsCfg)
	handler := func(ctx context.Context, t worker.Task) error {
		total, err := sumOrders(ctx, t.LogicalTime) // the work, done before the commit
		if err != nil {
			return err
		}
		fence, err := t.Fence()
		if err != nil {
			return worker.Permanent(err) // ErrNoFence: the ledger is not DynamoDB
		}
		_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			fence, // first: FenceRefused reads the first item's reason
			{Put: &types.Put{
				TableName: aws.String("daily_totals"),
				Item: map[string]types.AttributeValue{
					"day":     &types.AttributeValueMemberS{Value: t.LogicalTime.Format(time.DateOnly)},
					"total":   &types.AttributeValueMemberN{Value: strconv.FormatInt(total, 10)},
					"attempt": &types.AttributeValueMemberN{Value: strconv.Itoa(t.Attempt)},
				},
				ConditionExpression:      aws.String("attribute_not_exists(#d)"),
				ExpressionAttributeNames: map[string]string{"#d": "day"},
			}},
		}})
		var cancelled *types.TransactionCanceledException
		switch {
		case err == nil:
			return nil
		case worker.FenceRefused(err):
			// Not this attempt's task any more (its retry started, it
			// ended, or it was found LOST): nothing was written, and this
			// attempt's later tries cannot pass. A retryable failure: if
			// the attempt was only LOST, the task is retried.
			return worker.WithCategory(err, "fenced")
		case errors.As(err, &cancelled) && len(cancelled.CancellationReasons) > 1 &&
			aws.ToString(cancelled.CancellationReasons[1].Code) == "ConditionalCheckFailed":
			return nil // an earlier attempt committed the day's total before it was given up
		default:
			return err // a conflict or throttling: retried by the job's policy
		}
	}
	_ = handler
}

// sumOrders stands for the handler's work.
func sumOrders(context.Context, time.Time) (int64, error) { return 0, nil }
