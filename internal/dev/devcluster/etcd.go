package devcluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
)

// startEtcd starts etcd on two free ports with an empty data directory.
func (c *Cluster) startEtcd(ctx context.Context) error {
	logPath := c.LogPath(ComponentEtcd)
	dataDir := c.path("etcd")
	for attempt := 1; ; attempt++ {
		t := time.Now()
		if err := os.RemoveAll(dataDir); err != nil {
			return &StartError{Step: ComponentEtcd, Err: err}
		}
		ports, err := freePorts(2)
		if err != nil {
			return &StartError{Step: ComponentEtcd, Err: err}
		}
		client := fmt.Sprintf("http://%s:%d", loopbackHost, ports[0])
		peer := fmt.Sprintf("http://%s:%d", loopbackHost, ports[1])
		p, err := c.run(ComponentEtcd, c.Binaries.Etcd, []string{
			"--name=lull-dev",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=lull-dev=" + peer,
			"--initial-cluster-state=new",
			"--unsafe-no-fsync", // a throwaway dev cluster: speed over durability
			"--log-level=warn",
		})
		if err != nil {
			return &StartError{Step: ComponentEtcd, Log: logPath, Err: err}
		}
		err = waitReady(ctx, p, readyTimeout, func(ctx context.Context) error {
			body, err := httpGet(ctx, http.DefaultClient, client+"/health")
			if err == nil && !strings.Contains(body, `"health":"true"`) {
				err = fmt.Errorf("/health: %s", body)
			}
			return err
		})
		if err != nil {
			if retry := attempt < portAttempts && addrInUse(logPath); retry {
				c.discard(p)
				c.progress("%s lost a port race, restarting on new ports", t, ComponentEtcd)
				continue
			}
			return &StartError{Step: ComponentEtcd, Log: logPath, Err: err}
		}
		c.EtcdURL = client
		c.progress("etcd ready on %s", t, strings.TrimPrefix(client, "http://"))
		return nil
	}
}
