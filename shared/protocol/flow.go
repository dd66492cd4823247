package protocol

import "time"

// Admission states and reasons of a run in its limiter.
const (
	AdmissionWaiting  = "waiting"
	AdmissionAdmitted = "admitted"
)

// Admission is where a run of a limited job stands in its limiter (the
// run answer's "admission"; absent for a job without limits): waiting,
// with why (concurrency or rate_limit) and its place in the queue (1:
// next; 0 when the queue is too long to count), or admitted, with when
// (null for a run that ended: its room is given back).
type Admission struct {
	State      string    `json:"state"`
	Reason     string    `json:"reason,omitempty"`
	Limiter    string    `json:"limiter"`
	Place      int       `json:"place,omitempty"`
	AdmittedAt time.Time `json:"admitted_at,omitzero"`
}

// MarshalJSON writes the contract's shape.
func (a Admission) MarshalJSON() ([]byte, error) { return marshalView(a) }
