package app

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/runledger/runledger/shared/ecsexec"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/scheduler"
)

// awsECS is a Lambda entry's ecs executor: ECS through the SDK, the
// containers calling the API at RUNLEDGER_API_URL. Only a deployment that
// allows ECS task definitions (RUNLEDGER_EXECUTORS_ALLOWED) has one.
func awsECS(awsCfg aws.Config, allowed jobspec.Allowed, getenv func(string) string) ([]scheduler.Executor, error) {
	if len(allowed.ECSTaskDefinitions) == 0 {
		return nil, nil
	}
	apiURL := getenv("RUNLEDGER_API_URL")
	if apiURL == "" {
		return nil, configErrorf("RUNLEDGER_API_URL is empty, and the ecs executor's containers need it")
	}
	return []scheduler.Executor{ecsexec.NewExecutor(ecsexec.Client{API: ecs.NewFromConfig(awsCfg)}, apiURL)}, nil
}

// DefaultLocalECSCluster is the cluster the local stack's ecs tasks run on
// when none is named.
const DefaultLocalECSCluster = "local"

// LocalECS runs the ecs executor's tasks in the local stack as local
// processes (ecsexec.Processes): each task definition family stands for a
// command, and DescribeTasks answers from the process's real exit status.
type LocalECS struct {
	// Definitions map a task definition family to the command (executable
	// and arguments) that stands for its container.
	Definitions map[string][]string
	// Clusters jobs may name (default DefaultLocalECSCluster).
	Clusters []string
	// StopGrace is the time between SIGTERM and SIGKILL on StopTask
	// (default ecsexec.DefaultStopGrace).
	StopGrace time.Duration
	// Logger receives the processes' output (default: discarded).
	Logger *slog.Logger
}

// Part returns the part named "ecs" and the processes it runs (the
// end-to-end tests signal them). Job definitions may name exactly its
// clusters and task definitions.
func (l LocalECS) Part() (Part, *ecsexec.Processes, error) {
	if len(l.Definitions) == 0 {
		return Part{}, nil, configErrorf("local ecs: no task definition is registered")
	}
	for family, argv := range l.Definitions {
		if family == "" || family != ecsexec.Family(family) || len(argv) == 0 || argv[0] == "" {
			return Part{}, nil, configErrorf("local ecs: task definition %q: want a family name and a command", family)
		}
	}
	clusters := l.Clusters
	if len(clusters) == 0 {
		clusters = []string{DefaultLocalECSCluster}
	}
	procs := &ecsexec.Processes{Definitions: l.Definitions, StopGrace: l.StopGrace, Logger: l.Logger}
	x := ecsexec.NewExecutor(procs, "")
	return Part{
		Name:      "ecs",
		Executors: []scheduler.Executor{x},
		Allowed:   jobspec.Allowed{ECSClusters: slices.Clone(clusters), ECSTaskDefinitions: slices.Sorted(maps.Keys(l.Definitions))},
		Start: func(loc Local) (func(context.Context) error, error) {
			x.SetAPIURL(loc.APIURL)
			return procs.Run, nil
		},
	}, procs, nil
}
