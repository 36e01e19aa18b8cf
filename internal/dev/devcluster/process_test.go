package devcluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// helperStateEnv makes the test binary start a cluster in that state
// directory, print "READY" and hang until killed.
const helperStateEnv = "DEVCLUSTER_TEST_HELPER_STATE"

// TestChildrenDieWithParent kills (SIGKILL) a process that started a
// cluster without stopping it and checks the kernel took every component
// down with it.
func TestChildrenDieWithParent(t *testing.T) {
	if dir := os.Getenv(helperStateEnv); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := Start(ctx, Options{StateDir: dir}); err != nil {
			fmt.Println("START FAILED:", err)
			os.Exit(1)
		}
		fmt.Println("READY")
		time.Sleep(time.Hour)
		return
	}

	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithParent$")
	cmd.Env = append(os.Environ(), helperStateEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var output []string
	timeout := time.After(2 * time.Minute)
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("helper exited before READY:\n%s", strings.Join(output, "\n"))
			}
			output = append(output, l)
			if l == "READY" {
				break wait
			}
		case <-timeout:
			t.Fatalf("helper not READY:\n%s", strings.Join(output, "\n"))
		}
	}
	if n := len(processesMentioning(dir)); n != 5 {
		t.Errorf("%d component processes running, want 5", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	go func() {
		for range lines {
		}
	}()
	eventually(t, 5*time.Second, "components killed with their parent", func(context.Context) error {
		if left := processesMentioning(dir); len(left) > 0 {
			return fmt.Errorf("still running: %v", left)
		}
		return nil
	})
}
