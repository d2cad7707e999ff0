package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Audit counts audit events and session recordings that could not be
// written (--audit-log, --record-sessions): a full disk or an unwritable
// file is never silent. A nil *Audit counts nothing.
type Audit struct {
	errors       prometheus.Counter
	recordErrors prometheus.Counter
}

// NewAudit creates the counters on reg.
func NewAudit(reg prometheus.Registerer) *Audit {
	f := promauto.With(reg)
	return &Audit{
		errors: f.NewCounter(prometheus.CounterOpts{
			Name: "crishim_audit_errors_total",
			Help: "Audit events crishim could not write to --audit-log (full disk, unwritable file); each is also logged at warn.",
		}),
		recordErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "crishim_record_errors_total",
			Help: "Session recordings that could not be created or stopped on a write error (--record-dir); the sessions went on, each is logged at warn.",
		}),
	}
}

// AuditError counts one event not written.
func (m *Audit) AuditError() {
	if m != nil {
		m.errors.Inc()
	}
}

// RecordError counts one recording lost or stopped.
func (m *Audit) RecordError() {
	if m != nil {
		m.recordErrors.Inc()
	}
}
