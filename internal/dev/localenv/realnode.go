package localenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	lullv1 "lull.dev/lull/api/v1alpha1"
	"lull.dev/lull/internal/dev/devcluster"
	"lull.dev/lull/internal/dev/images"
)

// The images of the real node, tagged as `make images` tags lull's own
// (the agent's is lullv1.DefaultAgentImage, so `agent: {}` runs it).
var (
	imageRegistry, imageVersion = splitImage(lullv1.DefaultAgentImage)

	// ControllerImage is the controller's image on the real node (the
	// Helm chart's default repository, at the chart's appVersion).
	ControllerImage = imageRegistry + "/lull-controller:" + imageVersion
	// PauseImage is the real node's sandbox image.
	PauseImage = imageRegistry + "/pause:" + imageVersion
	// RuntimeImage is the reference runtime's image (`lull
	// example-runtime`, as cmd/example-runtime).
	RuntimeImage = imageRegistry + "/example-runtime:" + imageVersion
	// RuntimeAliases are the names the demo and the tests give the
	// runtime's image: each is the reference runtime on the real node, so
	// a rollout from one to another is an image change the kubelet
	// really makes.
	RuntimeAliases = []string{"example.com/lull/turnrunner:v1", "example.com/lull/turnrunner:v2", "example.com/lull/turnrunner:v3"}
)

// splitImage splits "ghcr.io/lull-dev/lull-agent:v0.1.0" into
// "ghcr.io/lull-dev" and "v0.1.0".
func splitImage(ref string) (registry, version string) {
	repo, version, _ := strings.Cut(ref, ":")
	return repo[:strings.LastIndex(repo, "/")], version
}

// buildNodeImages builds lull's images, the reference runtime's and the
// pause image into dir (package images, from the source of the module
// this runs in) and returns them as the real node imports them.
func buildNodeImages(ctx context.Context, dir string, progress io.Writer) ([]devcluster.NodeImage, error) {
	t := time.Now()
	module, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	all := append(append([]images.Image(nil), images.Lull...), images.RealNode...)
	built, err := images.Build(ctx, images.Options{Module: module, Out: dir, Registry: imageRegistry, Version: imageVersion}, all)
	if err != nil {
		return nil, fmt.Errorf("real node images: %w", err)
	}
	var out []devcluster.NodeImage
	for i, b := range built {
		im := devcluster.NodeImage{Tarball: filepath.Join(dir, all[i].Name+".tar"), Ref: b.Ref}
		if b.Ref == RuntimeImage {
			im.Aliases = RuntimeAliases
		}
		out = append(out, im)
	}
	fmt.Fprintf(progress, "%d images built for the real node (%s)\n", len(out), since(t))
	return out, nil
}

// moduleRoot is the directory of lull's go.mod: the real node's images are
// built from source.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "lull.dev/lull").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", moduleRootError(err)
	}
	return dir, nil
}

// moduleRootError explains why lull's source was not found: go is not on
// PATH (sudo resets it), or this is not run inside the lull repository.
func moduleRootError(err error) error {
	if errors.Is(err, exec.ErrNotFound) {
		return fmt.Errorf("the real node's images are built from lull's source with go, which is not on PATH (%w; sudo resets PATH): run `%s`", err, devcluster.RealNodeAsRoot)
	}
	var ee *exec.ExitError
	msg := ""
	if errors.As(err, &ee) {
		msg = ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return fmt.Errorf("the real node's images are built from lull's source with go: run lull dev --real-node inside the lull repository (go list -m lull.dev/lull failed%s)", msg)
}

// journalMount is where a runtime on the real node finds the runner's
// journal directory, through the volume journalVolume; envTurnJournal is
// the variable the reference runtime's image reads the file's path from
// (cmd/example-runtime: a template may not set LULL_ variables).
const (
	journalMount   = "/var/run/turn-journal"
	journalVolume  = "turn-journal"
	envTurnJournal = "TURN_JOURNAL"
)

// OnRealNode places the pods of t on the real node: a node selector and a
// toleration of its taint, and the runtime container's turn journal
// written through a hostPath into the journal directory the auditor reads
// (Runner.JournalDir), one file per pod. It fails if the environment has
// no real node.
func (e *Env) OnRealNode(t *lullv1.SessionTemplate) error {
	node := e.Cluster.RealNodeName
	if node == "" {
		return errors.New("localenv: no real node: start the environment with Options.RealNode (lull dev --real-node)")
	}
	spec := &t.Spec.Template.Spec
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[corev1.LabelHostname] = node
	spec.Tolerations = append(spec.Tolerations, RealNodeToleration())
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: journalVolume, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: e.Runner.JournalDir(), Type: ptr.To(corev1.HostPathDirectory)}}})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if c.Name != lullv1.RuntimeContainerName {
			continue
		}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: journalVolume, MountPath: journalMount})
		// lull puts its LULL_* variables first, so $(LULL_POD_UID) expands.
		c.Env = append(c.Env, corev1.EnvVar{Name: envTurnJournal, Value: journalMount + "/$(" + lullv1.EnvPodUID + ").jsonl"})
	}
	return nil
}

// RealNodeToleration tolerates the real node's taint.
func RealNodeToleration() corev1.Toleration {
	return corev1.Toleration{Key: devcluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}
