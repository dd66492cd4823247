package scheduler

import (
	"crypto/sha256"
	"sync"

	"github.com/runledger/runledger/shared/jobspec"
)

// Bounds of a Service's compiled jobs: a deployment's live job versions
// fit many times over, and the specs they hold stay well inside a Lambda
// function's memory (a definition may be 256 KB).
const (
	maxCompiledJobs      = 256
	maxCompiledSpecBytes = 16 << 20
)

// compiledJobs are the job versions a Service has compiled, by the SHA-256
// of their spec: every run carries its job version's spec (ledger.Run.Spec),
// and equal bytes are the same version, so a pass over a run of a version
// seen before finds its definition loaded and its key templates parsed.
// Past its bounds it forgets entries at random (map order): a forgotten
// version is compiled again on its next use. A spec that fails to load is
// not kept; it fails the same way each time. The zero value is empty and
// ready.
type compiledJobs struct {
	mu        sync.Mutex
	bySpec    map[[sha256.Size]byte]compiledJob
	specBytes int // the specs of bySpec together
}

type compiledJob struct {
	job  *jobspec.Compiled
	size int // its spec's bytes
}

// of is the compiled form of spec, compiled now if it is not kept.
func (cj *compiledJobs) of(spec []byte) (*jobspec.Compiled, error) {
	sum := sha256.Sum256(spec)
	cj.mu.Lock()
	e, ok := cj.bySpec[sum]
	cj.mu.Unlock()
	if ok {
		return e.job, nil
	}
	// Compiled outside the lock: two passes that miss the same version at
	// once both compile it, and the first kept is the one kept.
	c, err := compileSpec(spec)
	if err != nil {
		return nil, err
	}
	cj.mu.Lock()
	defer cj.mu.Unlock()
	if e, ok := cj.bySpec[sum]; ok {
		return e.job, nil
	}
	if cj.bySpec == nil {
		cj.bySpec = map[[sha256.Size]byte]compiledJob{}
	}
	for k, old := range cj.bySpec {
		if len(cj.bySpec) < maxCompiledJobs && cj.specBytes+len(spec) <= maxCompiledSpecBytes {
			break
		}
		delete(cj.bySpec, k)
		cj.specBytes -= old.size
	}
	cj.bySpec[sum] = compiledJob{job: c, size: len(spec)}
	cj.specBytes += len(spec)
	return c, nil
}

// compileSpec loads a stored definition (a job's, or a run's copy of it)
// and compiles it: the scheduler reads job specs here only.
func compileSpec(spec []byte) (*jobspec.Compiled, error) {
	j, err := jobspec.Load(spec)
	if err != nil {
		return nil, err
	}
	return jobspec.Compile(j), nil
}
