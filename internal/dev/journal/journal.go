// Package journal is the turn journal a reference runtime keeps: one JSON
// object per line, appended as each turn begins and ends, so an auditor that
// does not trust the runtime's reports can tell which turns a pod deletion
// interrupted.
package journal

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Event is what happened to a turn.
type Event string

// The journal events.
const (
	// Begin: the gate accepted the turn and work started.
	Begin Event = "begin"
	// End: the work finished; written before the turn is released.
	End Event = "end"
	// Refused: the gate refused the turn because the session is draining.
	Refused Event = "refused"
	// Notice: what the runtime was told without being asked anything
	// changed: a drain deadline, a pending update. Turn is 0.
	Notice Event = "notice"
)

// Entry is one journal line.
type Entry struct {
	Time      time.Time `json:"time"`
	Namespace string    `json:"namespace"`
	Session   string    `json:"session"`
	PodUID    types.UID `json:"podUID"`
	Turn      int       `json:"turn"`
	Event     Event     `json:"event"`
	// WorkspacePods, on a begin, lists the pods whose turns had written to
	// the session's workspace before this turn (the reference runtime's
	// --workspace): a workspace that survived a replacement lists the pods
	// before.
	WorkspacePods []string `json:"workspacePods,omitempty"`
	// Deadline and UpdatePending, on a notice: the drain request's deadline
	// and whether the pod's revision is stale, as the runtime saw them.
	Deadline      *time.Time `json:"deadline,omitempty"`
	UpdatePending bool       `json:"updatePending,omitempty"`
}

// Writer appends entries to a journal file; safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Create opens path for appending, creating it if needed.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Write appends e as one line, in a single write so concurrent readers never
// see half an entry.
func (w *Writer) Write(e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// ReadDir reads every *.jsonl journal in dir. A torn last line (a runtime
// killed mid-write) is skipped; any other malformed line is an error.
func ReadDir(dir string) ([]Entry, error) {
	var all []Entry
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl") {
			return err
		}
		entries, err := readFile(path)
		all = append(all, entries...)
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return all, err
}

func readFile(path string) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	line := 0
	var bad error
	for sc.Scan() {
		line++
		if bad != nil {
			return nil, bad // a malformed line that was not the last
		}
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			bad = fmt.Errorf("%s:%d: %w", path, line, err)
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Turn is one turn reconstructed from the journal.
type Turn struct {
	Namespace, Session string
	PodUID             types.UID
	Turn               int
	Began, Ended       time.Time // Ended is zero when no end was journaled
}

// Turns pairs begin and end entries by pod and turn number. Refusals are
// counted separately.
func Turns(entries []Entry) (turns []Turn, refused int) {
	type key struct {
		pod  types.UID
		turn int
	}
	index := map[key]int{}
	for _, e := range entries {
		k := key{e.PodUID, e.Turn}
		switch e.Event {
		case Refused:
			refused++
		case Begin:
			index[k] = len(turns)
			turns = append(turns, Turn{Namespace: e.Namespace, Session: e.Session, PodUID: e.PodUID, Turn: e.Turn, Began: e.Time})
		case End:
			if i, ok := index[k]; ok {
				turns[i].Ended = e.Time
			}
		}
	}
	return turns, refused
}
