package fencelock_test

import (
	"testing"

	"github.com/fencelock/fencelock/internal/lockmodel"
	"github.com/fencelock/fencelock/internal/servertest"
)

// knownDefect lists the defects whose fixes are not merged yet: the model
// avoids or tolerates exactly the combination that shows each (see
// lockmodel.Defect), so that it keeps finding others meanwhile.
var knownDefect = map[lockmodel.Defect]bool{
	lockmodel.DefectHandOffToOwner:   true,
	lockmodel.DefectForceReleaseNext: true,
	lockmodel.DefectJobLateInstance:  true,
	lockmodel.DefectJobRunLost:       true,
	lockmodel.DefectForcedLostReply:  true,
	lockmodel.DefectRWWriterMark:     true,
}

// The model of every feature together, on the memory backend in virtual
// time: see internal/lockmodel.
func TestModelMemory(t *testing.T) {
	tg := lockmodel.Memory()
	tg.Known = knownDefect
	lockmodel.Run(t, tg)
}

// The model against a real redis-server, in real time: fewer steps, and
// the tolerances of real time (see lockmodel.Target.Tolerance and the
// model's realSlack).
func TestModelRedis(t *testing.T) {
	srv := servertest.Redis(t)
	tg := lockmodel.Redis(t, srv.Addr())
	tg.Known = knownDefect
	lockmodel.Run(t, tg)
}
