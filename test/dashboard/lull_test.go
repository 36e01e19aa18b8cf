package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lullDashboard is the chart's dashboard.
var lullDashboard = filepath.Join("..", "..", "charts", "lull", "dashboards", "lull.json")

// The chart's dashboard imports into a current Grafana with any
// Prometheus data source, filters by namespace and template, and every
// query parses and selects its metrics by name. That each of those
// metrics is served is checked against the controller's /metrics after a
// rollout (test/integration TestMetricsOfADrain).
func TestLullDashboard(t *testing.T) {
	model, err := os.ReadFile(lullDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		SchemaVersion int `json:"schemaVersion"`
		UID           string
		Templating    struct {
			List []struct {
				Name       string
				Type       string
				Query      json.RawMessage
				Datasource json.RawMessage
			}
		}
		Panels []map[string]any
	}
	if err := json.Unmarshal(model, &d); err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want at least 39 (Grafana 10.4 and later)", d.SchemaVersion)
	}
	if d.UID == "" {
		t.Error("no uid: every import would make a new dashboard")
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		var ds struct{ UID string }
		if err := json.Unmarshal(v.Datasource, &ds); err != nil || ds.UID != "${datasource}" {
			t.Errorf("variable %q: datasource %s, want uid ${datasource}", v.Name, v.Datasource)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "namespace": "query", "template": "query"} {
		if vars[name] != typ {
			t.Errorf("template variable %q is %q, want type %q", name, vars[name], typ)
		}
	}
	// Every data source reference in panels and targets is the variable:
	// a fixed uid would not exist in the operator's Grafana.
	var check func(where string, v any)
	check = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ds, ok := v["datasource"].(map[string]any); ok && ds["uid"] != "${datasource}" {
				t.Errorf("%s: datasource %v, want uid ${datasource}", where, ds)
			}
			for k, x := range v {
				check(where+"."+k, x)
			}
		case []any:
			for _, x := range v {
				check(where, x)
			}
		}
	}
	for _, p := range d.Panels {
		check("panel "+p["title"].(string), p)
		if p["type"] != "row" && p["datasource"] == nil {
			t.Errorf("panel %q has no datasource", p["title"])
		}
	}

	queries, err := Queries(model)
	if err != nil {
		t.Fatal(err)
	}
	var selectsByNamespace int
	for _, q := range queries {
		names, err := MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric by name", q.Where, q.Expr)
		}
		if strings.Contains(q.Expr, `namespace=~"$namespace"`) {
			selectsByNamespace++
		}
	}
	if selectsByNamespace == 0 {
		t.Error("no query filters by the namespace variable")
	}
}
