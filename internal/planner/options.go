package planner

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/migflex/migflex/internal/planner/plansnap"
	"github.com/migflex/migflex/internal/planner/reserve"
	"github.com/migflex/migflex/internal/planner/solver"
)

// Defaults of Options (documented in docs/PLANNER.md).
const (
	DefaultFieldManager     = plansnap.DefaultFieldManager
	DefaultLeaseName        = "migflex-planner"
	DefaultMaxNodesPerRound = 8
	DefaultWriteParallelism = 8
	DefaultManualHold       = plansnap.DefaultManualHold
	DefaultStartGrace       = 10 * time.Second
	DefaultMixHalfLife      = time.Hour
	DefaultLeaseDuration    = 15 * time.Second
	DefaultRenewDeadline    = 10 * time.Second
	DefaultRetryPeriod      = 2 * time.Second
	DefaultMetricsAddr      = ":9124"
)

// Options configure a Controller.
type Options struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// Policy is the planner's: GPUs per round, cooldown, weights.
	Policy solver.Policy
	// FieldManager owns what the planner writes on Nodes. Default
	// DefaultFieldManager.
	FieldManager string
	// MaxNodesPerRound caps the nodes one round changes. Default
	// DefaultMaxNodesPerRound; negative: no cap.
	MaxNodesPerRound int
	// WriteParallelism bounds the Node writes of a round sent at once.
	// Default DefaultWriteParallelism.
	WriteParallelism int
	// ManualHold is how long a node is left alone after someone other
	// than the planner changed its nvidia.com/mig.config. Default
	// DefaultManualHold; negative: not at all.
	ManualHold time.Duration
	// Cadence debounces rounds with a solver.Batcher: a round starts once
	// nothing changed for Cadence.Idle, or Cadence.Max after the first
	// change it waits for, and again every Cadence.Resync while pods wait
	// without a change in the cluster (a cooldown ends, a hold lifts). A
	// zero Idle, Max or Resync is solver.DefaultCadence's, the cadence
	// the trace replay measures.
	Cadence solver.Cadence
	// StartGrace bounds how long a node whose pods just started is left
	// alone until its agent reports their devices in use. Default
	// DefaultStartGrace.
	StartGrace time.Duration
	// MixHalfLife is how fast the demand mix forgets. Default
	// DefaultMixHalfLife.
	MixHalfLife time.Duration
	// DryRun plans and explains (Events, the proposed-layout annotation)
	// but never writes nvidia.com/mig.config, and reserves nothing.
	DryRun bool
	// Reserve is when nodes are reserved for pods waiting for several
	// whole GPUs (internal/planner/reserve); Max 0, the zero Policy:
	// none. The command's default is reserve.DefaultPolicy.
	Reserve reserve.Policy

	// LeaderElection runs the rounds only in the replica holding the
	// Lease LeaseNamespace/LeaseName; Identity names this replica.
	LeaderElection bool
	LeaseNamespace string
	LeaseName      string
	Identity       string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration

	// Registry receives the metrics; nil: a new one with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.MaxNodesPerRound == 0 {
		o.MaxNodesPerRound = DefaultMaxNodesPerRound
	}
	if o.WriteParallelism == 0 {
		o.WriteParallelism = DefaultWriteParallelism
	}
	if o.ManualHold == 0 {
		o.ManualHold = DefaultManualHold
	}
	def := solver.DefaultCadence()
	if o.Cadence.Idle == 0 {
		o.Cadence.Idle = def.Idle
	}
	if o.Cadence.Max == 0 {
		o.Cadence.Max = max(def.Max, o.Cadence.Idle)
	}
	if o.Cadence.Resync == 0 {
		o.Cadence.Resync = def.Resync
	}
	if o.StartGrace == 0 {
		o.StartGrace = DefaultStartGrace
	}
	if o.MixHalfLife == 0 {
		o.MixHalfLife = DefaultMixHalfLife
	}
	if o.LeaseName == "" {
		o.LeaseName = DefaultLeaseName
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = DefaultRenewDeadline
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = DefaultRetryPeriod
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registry == nil {
		o.Registry = newRegistry()
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	if err := o.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Reserve.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("reservations: %w", err))
	}
	if o.WriteParallelism < 0 {
		errs = append(errs, fmt.Errorf("write parallelism %d is negative", o.WriteParallelism))
	}
	if o.StartGrace < 0 {
		errs = append(errs, fmt.Errorf("start grace %s is negative", o.StartGrace))
	}
	if err := o.Cadence.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("batching rounds: %w", err))
	}
	if o.LeaderElection {
		if o.LeaseNamespace == "" || o.Identity == "" {
			errs = append(errs, errors.New("leader election needs the Lease's namespace and this replica's identity"))
		}
		// client-go's own rules, said with the flags' names.
		if o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod || o.RetryPeriod <= 0 {
			errs = append(errs, fmt.Errorf("leader election wants lease duration (%s) > renew deadline (%s) > retry period (%s) > 0",
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
		}
	}
	return errors.Join(errs...)
}
