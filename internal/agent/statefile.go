package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"lull.dev/lull/runtimesdk"
)

// DefaultStateFile is where the agent records its turns unless told
// otherwise: under /var/run/lull, where the session pod mounts an emptyDir
// volume into the agent's container. An emptyDir outlives a restart of the
// container but not the pod, which is what the turns need: the runtime in
// the other container keeps its turns when the agent restarts, and a new
// pod starts with none.
const DefaultStateFile = "/var/run/lull/agent-turns.json"

// EnvStateFile is the environment variable that sets the state file when
// the --state-file flag is not given.
const EnvStateFile = "LULL_AGENT_STATE_FILE"

// stateVersion is the version of the state file's format. A file of another
// version is refused like a corrupt one.
const stateVersion = 1

// stateDoc is the state file: the turns the agent holds for the runtime of
// one pod, in order of their begin.
//
//	{"version":1,"podUID":"…","turns":[{"id":"t-…","lease":"30s","leaseDeadline":"…","begun":"…"}]}
type stateDoc struct {
	Version int         `json:"version"`
	PodUID  types.UID   `json:"podUID"`
	Turns   []stateTurn `json:"turns"`
}

// stateTurn is one turn of the state file.
type stateTurn struct {
	ID string `json:"id"`
	// Lease is a Go duration; empty for a turn without a lease.
	Lease string `json:"lease,omitempty"`
	// LeaseDeadline is when the lease runs out unless renewed.
	LeaseDeadline time.Time `json:"leaseDeadline,omitzero"`
	Begun         time.Time `json:"begun"`
}

// encodeState returns the state file of pod holding records.
func encodeState(pod types.UID, records []runtimesdk.TurnRecord) []byte {
	doc := stateDoc{Version: stateVersion, PodUID: pod, Turns: make([]stateTurn, len(records))}
	for i, r := range records {
		doc.Turns[i] = stateTurn{ID: r.ID, LeaseDeadline: r.LeaseDeadline, Begun: r.Begun}
		if r.Lease > 0 {
			doc.Turns[i].Lease = r.Lease.String()
		}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err) // strings, times and a UID always marshal
	}
	return append(b, '\n')
}

// decodeState parses a state file: the pod it was written for and its
// turns. It refuses unknown fields, another version, a missing pod UID, a
// lease that is not a duration and anything after the document. The turns
// themselves are checked by runtimesdk.Gate.Restore.
func decodeState(b []byte) (types.UID, []runtimesdk.TurnRecord, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var doc stateDoc
	if err := dec.Decode(&doc); err != nil {
		return "", nil, err
	}
	if dec.More() {
		return "", nil, errors.New("data after the JSON document")
	}
	if doc.Version != stateVersion {
		return "", nil, fmt.Errorf("version %d, want %d", doc.Version, stateVersion)
	}
	if doc.PodUID == "" {
		return "", nil, errors.New("podUID is empty")
	}
	records := make([]runtimesdk.TurnRecord, len(doc.Turns))
	for i, t := range doc.Turns {
		records[i] = runtimesdk.TurnRecord{ID: t.ID, LeaseDeadline: t.LeaseDeadline, Begun: t.Begun}
		if t.Lease != "" {
			d, err := time.ParseDuration(t.Lease)
			if err != nil {
				return "", nil, fmt.Errorf("turn %s: lease: %w", t.ID, err)
			}
			records[i].Lease = d
		}
	}
	return doc.PodUID, records, nil
}

// writeFileAtomic replaces the file at path with b so that a reader, or the
// agent restarted after a crash at any point, finds either the old content
// or the new: it writes a temporary file in the same directory, syncs it,
// renames it over path and syncs the directory.
func writeFileAtomic(path string, b []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name()) //nolint:errcheck // best effort; Open sweeps leftovers
		}
	}()
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// tempPattern is the os.CreateTemp pattern of path's temporary files.
func tempPattern(path string) string { return "." + filepath.Base(path) + ".tmp-*" }

// removeTempFiles removes temporary files an earlier agent left beside path
// when it stopped in the middle of a write.
func removeTempFiles(path string) error {
	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(path), tempPattern(path)))
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range leftovers {
		errs = append(errs, os.Remove(name))
	}
	return errors.Join(errs...)
}
