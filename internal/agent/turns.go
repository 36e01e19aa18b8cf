package agent

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/runtimesdk"
)

// The turns begun through the API live in the agent's memory and in its
// state file. The file is rewritten, whole and atomically, before the
// agent answers a request that changed a turn (begin, end, renew), so a
// turn the runtime was told it holds is always on disk. A begin whose write
// fails is undone and refused. An end or renewal whose write fails still
// takes effect and is answered, because the file then errs only towards
// holding a drain longer: it still lists the ended turn, or an earlier
// deadline, which a restarted agent treats as lapsed and gives its grace.
// The next successful write corrects it. A lease that expires changes
// nothing on disk until the next write; restored, such a turn is lapsed
// and expires after its grace.

// restore makes the turns of the state file active in the gate and
// records them in the table, then writes the file again, which also shows
// at once that it can be written. A missing file means no turns: the
// agent's first start in its pod. A file written for another pod is set
// aside: its turns belonged to a runtime that is gone with that pod.
//
// A file that exists but cannot be read or parsed, or holds turns the gate
// refuses, is an error, and the agent does not start. The agent cannot know
// which turns the runtime holds, and starting with none would report
// Drained at the next drain request, under live work. Refusing to start
// fails closed: the session's last report stays, written by an agent that
// knew its turns (Drained only with none), so the controller deletes
// nothing it would not have; the runtime's new turns fail visibly while
// nothing listens; and the way out is explicit. Starting and holding the
// gate in Draining instead would hide the fault behind a session that
// seems to work, and wait for the same manual step.
func (s *Server) restore() error {
	if err := removeTempFiles(s.stateFile); err != nil {
		return fmt.Errorf("agent state file %s: removing temporary files left by an earlier agent: %w", s.stateFile, err)
	}
	b, err := os.ReadFile(s.stateFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return s.unusable(err)
	default:
		pod, records, err := decodeState(b)
		if err != nil {
			return s.unusable(err)
		}
		if pod != s.pod {
			s.log.Warn("agent state file was written in another pod; its turns are not this runtime's and are dropped",
				"file", s.stateFile, "writtenFor", pod, "turns", len(records))
			break
		}
		if len(records) > 0 {
			turns, err := s.gate.Restore(records)
			if err != nil {
				return s.unusable(err)
			}
			for _, t := range turns {
				s.turns[t.ID()] = t
			}
			s.log.Info("restored the runtime's turns from the agent state file", "file", s.stateFile, "turns", len(turns))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.persist(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("agent state file %s: directory %s does not exist: mount an emptyDir volume there (it must outlive the agent's container) or set --state-file (%s)", s.stateFile, filepath.Dir(s.stateFile), EnvStateFile)
		}
		return fmt.Errorf("agent state file %s cannot be written: %w", s.stateFile, err)
	}
	return nil
}

// unusable is the error of a state file that exists but cannot be used.
func (s *Server) unusable(err error) error {
	return fmt.Errorf("agent state file %s: %w. It records the turns the runtime holds; without them the agent could report Drained under live work, so it does not start. "+
		"If the runtime holds no turns, remove the file; otherwise replace the pod by setting the annotation %s on the session",
		s.stateFile, err, lullv1.AnnotationForceUpdate)
}

// persist writes the active turns to the state file and forgets the turns
// that ended or expired. s.mu is held.
func (s *Server) persist() error { return s.persistWithout("") }

// persistWithout is persist, leaving out the turn with ID skip (still in
// the table): the state file of that turn ended.
func (s *Server) persistWithout(skip string) error {
	records := make([]runtimesdk.TurnRecord, 0, len(s.turns))
	for id, t := range s.turns {
		if t.Err() != nil {
			delete(s.turns, id)
			continue
		}
		if id == skip {
			continue
		}
		records = append(records, t.Record())
	}
	slices.SortFunc(records, func(a, b runtimesdk.TurnRecord) int {
		return cmp.Or(a.Begun.Compare(b.Begun), cmp.Compare(a.ID, b.ID))
	})
	return writeFileAtomic(s.stateFile, encodeState(s.pod, records))
}

// addTurn records a turn begun through the API in the table and the state
// file. On error the turn is in neither; the caller ends it.
func (s *Server) addTurn(t *runtimesdk.Turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns[t.ID()] = t
	if err := s.persist(); err != nil {
		delete(s.turns, t.ID())
		return err
	}
	return nil
}

// finishTurn ends a turn once the state file no longer lists it. If the file
// cannot be written, the turn is not ended and the error is returned: an
// end the runtime was told had happened must not come back as an active
// turn after an agent restart, where a turn without a lease would then hold
// a drain forever with nobody left to end it. The runtime retries its end.
func (s *Server) finishTurn(t *runtimesdk.Turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.persistWithout(t.ID()); err != nil {
		return err
	}
	t.End()
	delete(s.turns, t.ID())
	return nil
}

// turn returns the turn of the table with this ID, or nil.
func (s *Server) turn(id string) *runtimesdk.Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turns[id]
}

// saveTurns writes the state file after a turn expired or was renewed; a
// failure is logged and the request still succeeds: the file then holds the
// turn's earlier record, a leased one, which a restarted agent restores as
// lapsed and lets expire after its grace.
func (s *Server) saveTurns(id, change string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.persist(); err != nil {
		s.log.Error("writing the agent state file failed; it keeps the turn's earlier record until the next write",
			"file", s.stateFile, "turn", id, "change", change, "err", err)
	}
}
