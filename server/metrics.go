package server

import (
	"strconv"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the server's Prometheus series. Label values are created up
// front so every series exists from the start, and hot paths hold the child
// metric, not a label lookup.
type metrics struct {
	connections    prometheus.Gauge
	parked         prometheus.Gauge
	holding        prometheus.Gauge
	waiting        prometheus.Gauge
	locks          prometheus.Gauge
	grantImmediate prometheus.Counter
	grantPromotion prometheus.Counter
	// grantExclusive and grantShared count the same grants by claim.
	grantExclusive prometheus.Counter
	grantShared    prometheus.Counter
	handovers      map[EndReason]prometheus.Counter
	handoverTime   prometheus.Histogram
	// waitTime and holdTime are per lock name when lockNames is positive,
	// for dashboards; names past lockNames share the label otherLocks (see
	// series). With lockNames 0 they carry no label, and allLocks observes
	// every lock.
	waitTime       *prometheus.HistogramVec
	holdTime       *prometheus.HistogramVec
	lockNames      int
	lockSeries     map[string]*lockObservers // guarded by Server.mu
	allLocks       *lockObservers
	expiredHolding prometheus.Counter
	expiredWaiting prometheus.Counter
	heartbeats     prometheus.Counter
	protocolErrors map[wire.Code]prometheus.Counter
	refusedSess    prometheus.Counter
	refusedWaiters prometheus.Counter
	refusedConns   prometheus.Counter
	refusedPerAddr prometheus.Counter
	refusedPerID   prometheus.Counter
	refusedFDs     prometheus.Counter
	aclRefusals    prometheus.Counter
	ended          map[EndReason]prometheus.Counter
	// Protocol version 3: resumes by kind and how the claim came back,
	// refused resumes by reason, pending claims of a planned handover and
	// those lost (never came back), records of ends made.
	resumes        map[resumeLabels]prometheus.Counter
	resumesRefused map[string]prometheus.Counter
	pending        prometheus.Gauge
	pendingLost    prometheus.Counter
	recorded       prometheus.Counter
}

// resumeLabels are a resume's labels: the kind of claim (holder, waiter)
// and how it came back (move: from a connection of this server; pending:
// listed by a planned handover; grace: a claim of an earlier term taken
// back in a crash grace).
type resumeLabels struct{ kind, how string }

// resumeRefusalReasons are the label values of baton_resumes_refused_total.
var resumeRefusalReasons = []string{"bad_credential", "generation", "no_credentials", "unauthorized", "recorded",
	"not_listed", "ended", "attempt", "frozen", "revoked", "superseded", "limit", "sessions", "waiters"}

// resumed counts a resume that went on.
func (m *metrics) resumed(held bool, how string) {
	kind := "waiter"
	if held {
		kind = "holder"
	}
	if c := m.resumes[resumeLabels{kind, how}]; c != nil {
		c.Inc()
	}
}

// resumeRefused counts a refused resume.
func (m *metrics) resumeRefused(reason string) {
	if c := m.resumesRefused[reason]; c != nil {
		c.Inc()
	}
}

// newMetrics registers the server's series in reg; lockNames is
// Config.MetricsLockNames.
func newMetrics(reg *prometheus.Registry, lockNames int) *metrics {
	sessions := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "baton_sessions", Help: "Sessions in the lock table, by state.",
	}, []string{"state"})
	grants := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_grants_total", Help: "Locks granted: at once on ACQUIRE, or by promotion from the queue.",
	}, []string{"kind"})
	claims := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_claim_grants_total",
		Help: "Locks granted, by claim: exclusive (protocol v1, or v2 without SHARED) or shared (v2 SHARED); the same grants as baton_grants_total.",
	}, []string{"claim"})
	handovers := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_handovers_total", Help: "Promotions of a waiter, by how the previous holder's session ended.",
	}, []string{"cause"})
	expiries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_lease_expiries_total", Help: "Sessions ended after a full lease of silence, by state.",
	}, []string{"state"})
	protoErrs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_protocol_errors_total", Help: "Client errors answered with ERROR, by code.",
	}, []string{"code"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_limit_refusals_total", Help: "Sessions refused by a server limit.",
	}, []string{"limit"})
	ended := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_sessions_ended_total", Help: "Sessions ended, by reason.",
	}, []string{"reason"})
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_connections", Help: "Open protocol connections, including those not yet past ACQUIRE.",
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_connections_parked",
			Help: "Connections of idle sessions watched by the idle poller, with no reader goroutine (see -park-idle).",
		}),
		holding: sessions.WithLabelValues("holding"),
		waiting: sessions.WithLabelValues("waiting"),
		locks: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "baton_locks", Help: "Locks that have a holder or waiters.",
		}),
		grantImmediate: grants.WithLabelValues("immediate"),
		grantPromotion: grants.WithLabelValues("promotion"),
		grantExclusive: claims.WithLabelValues("exclusive"),
		grantShared:    claims.WithLabelValues("shared"),
		handovers:      map[EndReason]prometheus.Counter{},
		handoverTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_handover_latency_seconds",
			Help:    "From the end of the holder's session to the push written to the next holder.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 20), // 5µs .. 2.6s
		}),
		expiredHolding: expiries.WithLabelValues("holding"),
		expiredWaiting: expiries.WithLabelValues("waiting"),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_heartbeats_total", Help: "HEARTBEAT frames received.",
		}),
		protocolErrors: map[wire.Code]prometheus.Counter{},
		refusedSess:    refusals.WithLabelValues("sessions"),
		refusedWaiters: refusals.WithLabelValues("waiters"),
		refusedConns:   refusals.WithLabelValues("connections"),
		refusedPerAddr: refusals.WithLabelValues("connections_per_ip"),
		refusedPerID:   refusals.WithLabelValues("connections_per_identity"),
		refusedFDs:     refusals.WithLabelValues("descriptors"),
		aclRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_acl_refusals_total", Help: "ACQUIREs refused by the access rules (-acl-file) with ERROR UNAUTHORIZED.",
		}),
		ended: map[EndReason]prometheus.Counter{},
	}
	for _, r := range allReasons {
		m.ended[r] = ended.WithLabelValues(r.String())
		if r.promotes() { // a series that could never count would only mislead
			m.handovers[r] = handovers.WithLabelValues(r.String())
		}
	}
	resumes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_resumes_total",
		Help: "Claims of protocol version 3 that went on on a new connection, by kind (holder, waiter) and how (move: from a connection of this server; pending: listed by a planned handover; grace: taken back in a crash grace).",
	}, []string{"kind", "how"})
	m.resumes = map[resumeLabels]prometheus.Counter{}
	for _, kind := range []string{"holder", "waiter"} {
		for _, how := range []string{"move", "pending", "grace"} {
			m.resumes[resumeLabels{kind, how}] = resumes.WithLabelValues(kind, how)
		}
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "baton_resumes_refused_total", Help: "Resumes of protocol version 3 refused, by reason.",
	}, []string{"reason"})
	m.resumesRefused = map[string]prometheus.Counter{}
	for _, r := range resumeRefusalReasons {
		m.resumesRefused[r] = refused.WithLabelValues(r)
	}
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_claims_pending", Help: "Claims of a planned handover's list not back yet: each keeps its slot or place until it resumes or its time is up.",
	})
	m.pendingLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "baton_pending_claims_lost_total", Help: "Resumable claims of a planned handover's list whose time ran out before they came back.",
	})
	m.recorded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "baton_claim_ends_recorded_total", Help: "Ends of claims of protocol version 3 recorded durably (an operator's release or kick, SUPERSEDED), so that no later server takes them back.",
	})
	reg.MustRegister(resumes, refused, m.pending, m.pendingLost, m.recorded)
	for _, c := range []wire.Code{wire.CodeProtocol, wire.CodeBadRequest, wire.CodeVersion, wire.CodeUnauthorized, wire.CodeLimitMismatch, wire.CodeBadCredential} {
		m.protocolErrors[c] = protoErrs.WithLabelValues(c.String())
	}
	m.lockNames = lockNames
	waitHelp := "Time from ACQUIRE to grant (0 for a lock granted at once), of every lock."
	holdHelp := "Time from grant to the end of the holder's session, of every lock."
	var labels []string
	if lockNames > 0 {
		waitHelp = "Time from ACQUIRE to grant (0 for a lock granted at once), per lock; locks past the first " + strconv.Itoa(lockNames) + " named share lock=\"" + otherLocks + "\"."
		holdHelp = "Time from grant to the end of the holder's session, per lock; locks past the first " + strconv.Itoa(lockNames) + " named share lock=\"" + otherLocks + "\"."
		labels = []string{"lock"}
	}
	m.waitTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "baton_wait_seconds", Help: waitHelp, Buckets: lockTimeBuckets,
	}, labels)
	m.holdTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "baton_hold_seconds", Help: holdHelp, Buckets: lockTimeBuckets,
	}, labels)
	m.lockSeries = make(map[string]*lockObservers)
	if lockNames == 0 {
		m.allLocks = &lockObservers{wait: m.waitTime.WithLabelValues(), hold: m.holdTime.WithLabelValues()}
	}
	reg.MustRegister(m.waitTime, m.holdTime)
	reg.MustRegister(m.connections, m.parked, sessions, m.locks, grants, claims, handovers, m.handoverTime,
		expiries, m.heartbeats, protoErrs, refusals, ended, m.aclRefusals,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// claimGrant counts a grant by its claim.
func (m *metrics) claimGrant(shared bool) {
	if shared {
		m.grantShared.Inc()
	} else {
		m.grantExclusive.Inc()
	}
}

// registerGrace adds the gauge of the crash-recovery grace period ending at
// until (zero: none), a reading of now.
func (m *metrics) registerGrace(reg *prometheus.Registry, until time.Time, now func() time.Time) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_grace_remaining_seconds",
		Help: "Time left in the crash-recovery grace period, during which no lock is granted; 0 outside it.",
	}, func() float64 {
		if until.IsZero() {
			return 0
		}
		return max(until.Sub(now()).Seconds(), 0)
	}))
}

// The lock names that get series of their own in baton_wait_seconds and
// baton_hold_seconds are bounded (Config.MetricsLockNames), and none by
// default: names are chosen by clients, /metrics is open to whoever
// reaches the ops listener, and a series per name without a bound would
// let clients grow the server's memory and every scrape without end.

// otherLocks is the label of the locks past Config.MetricsLockNames.
const otherLocks = "_other"

// lockTimeBuckets span a fast handover to a long batch job: 1 ms to ~4.6 h.
var lockTimeBuckets = prometheus.ExponentialBuckets(0.001, 4, 12)

// lockObservers are one lock label's series, looked up once per name so
// that a grant or a handover observes without a label lookup.
type lockObservers struct {
	label      string
	wait, hold prometheus.Observer
}

// series is the lock's series: its own for the first lockNames names
// seen, those of otherLocks after; allLocks' when lockNames is 0.
// Server.mu must be held.
func (m *metrics) series(name string) *lockObservers {
	if m.allLocks != nil {
		return m.allLocks
	}
	if o, ok := m.lockSeries[name]; ok {
		return o
	}
	label := name
	if len(m.lockSeries) >= m.lockNames {
		if o, ok := m.lockSeries[otherLocks]; ok {
			return o
		}
		label = otherLocks
	}
	o := &lockObservers{label: label, wait: m.waitTime.WithLabelValues(label), hold: m.holdTime.WithLabelValues(label)}
	m.lockSeries[label] = o
	return o
}

// slotsCollector publishes, for the lock names that have series of their
// own (Config.MetricsLockNames), how many hold each and the limit in force:
// a semaphore's slots in use out of its limit. It reads the table at each
// scrape, so grants cost nothing for it; a scrape costs a look-up per such
// name under the server's mutex, and their number is bounded.
type slotsCollector struct {
	srv            *Server
	holders, limit *prometheus.Desc
}

func newSlotsCollector(s *Server) *slotsCollector {
	return &slotsCollector{
		srv: s,
		holders: prometheus.NewDesc("baton_lock_holders",
			"Sessions holding the lock: slots in use of a semaphore, 1 for a held mutex; only for the lock names published by -metrics-lock-names.",
			[]string{"lock"}, nil),
		limit: prometheus.NewDesc("baton_lock_limit",
			"The limit in force for the lock's shared claims (protocol v2), while it has shared sessions; only for the lock names published by -metrics-lock-names.",
			[]string{"lock"}, nil),
	}
}

func (c *slotsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.holders
	ch <- c.limit
}

func (c *slotsCollector) Collect(ch chan<- prometheus.Metric) {
	type slots struct {
		name     string
		holders  int
		limit    int
		hasLimit bool
	}
	s := c.srv
	s.mu.Lock()
	out := make([]slots, 0, len(s.m.lockSeries))
	for label := range s.m.lockSeries {
		if label == otherLocks {
			continue // a name past the bound: it shares no state with the others
		}
		holders, _, _ := s.table.Occupancy(label)
		limit, ok := s.table.Limit(label)
		out = append(out, slots{label, holders, limit, ok})
	}
	s.mu.Unlock()
	for _, sl := range out {
		ch <- prometheus.MustNewConstMetric(c.holders, prometheus.GaugeValue, float64(sl.holders), sl.name)
		if sl.hasLimit {
			ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(sl.limit), sl.name)
		}
	}
}
