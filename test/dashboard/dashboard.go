// Package dashboard reads the metric names a Grafana dashboard queries, so
// a test can hold them against what the controller exports: a dashboard
// must not chart a metric nobody serves.
package dashboard

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is one PromQL expression of a dashboard: Where names it (the
// panel's title and the target's refId, or the template variable).
type Query struct {
	Where string
	Expr  string
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

type board struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// variableQuery matches the Prometheus data source's template variable
// queries that name a metric: label_values(<selector>, <label>) and
// query_result(<expr>).
var variableQuery = regexp.MustCompile(`^\s*(?:label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)|query_result\((.+)\))\s*$`)

// Queries returns every PromQL expression of a Grafana dashboard's JSON
// model: each panel target's expr (panels inside rows too) and the
// selector of each query variable's label_values() or query_result().
// Targets with an empty expr are skipped. The error says what could not be
// read.
func Queries(model []byte) ([]Query, error) {
	var b board
	if err := json.Unmarshal(model, &b); err != nil {
		return nil, fmt.Errorf("dashboard JSON: %w", err)
	}
	var out []Query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(b.Panels)
	for _, v := range b.Templating.List {
		if v.Type != "query" {
			continue
		}
		// Grafana stores a variable's query as a string or, in newer
		// models, as {"query": "..."}.
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("templating variable %q: query is neither a string nor {\"query\": ...}: %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		m := variableQuery.FindStringSubmatch(q)
		if m == nil {
			continue // label_values(<label>) and label_names() name no metric
		}
		out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: m[1] + m[2]})
	}
	return out, nil
}

// grafanaInterval matches Grafana's interval variables ($__rate_interval,
// ${__interval}, $__range, …), which PromQL cannot parse.
var grafanaInterval = regexp.MustCompile(`\$\{?__[a-z_]+\}?`)

// MetricNames returns the metric names expr selects, sorted and without
// duplicates: the name of every vector selector, or its __name__ equality
// matcher. Grafana's interval variables are read as 5m; other variables
// must sit inside label matcher strings, where PromQL takes them as text.
// The error is the parser's, naming the position.
func MetricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaInterval.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" && m.Type == 0 { // labels.MatchEqual
					name = m.Value
				}
			}
		}
		if name != "" {
			seen[name] = true
		}
		return nil
	})
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Family returns the family of families whose series a query of name
// selects: the family of that name, or, for <h>_bucket, histogram <h>, and
// for <h>_sum and <h>_count, histogram or summary <h>. A counter's family
// is named with its _total, as the text format exposes it, so nothing else
// is stripped. ok is false when no family serves name.
func Family(name string, families map[string]*dto.MetricFamily) (family string, ok bool) {
	if _, ok := families[name]; ok {
		return name, true
	}
	for suffix, types := range map[string][]dto.MetricType{
		"_bucket": {dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM},
		"_sum":    {dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM, dto.MetricType_SUMMARY},
		"_count":  {dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM, dto.MetricType_SUMMARY},
	} {
		base, found := strings.CutSuffix(name, suffix)
		if !found {
			continue
		}
		if f, ok := families[base]; ok {
			for _, t := range types {
				if f.GetType() == t {
					return base, true
				}
			}
		}
	}
	return "", false
}

// Missing returns, for each metric the dashboard model queries that no
// family of families serves, "<where>: <name>"; none when every one is
// served. The error says which query could not be read.
func Missing(model []byte, families map[string]*dto.MetricFamily) ([]string, error) {
	queries, err := Queries(model)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, q := range queries {
		names, err := MetricNames(q.Expr)
		if err != nil {
			return nil, fmt.Errorf("%s: expr %q: %w", q.Where, q.Expr, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: expr %q selects no metric by name", q.Where, q.Expr)
		}
		for _, n := range names {
			if _, ok := Family(n, families); !ok {
				missing = append(missing, q.Where+": "+n)
			}
		}
	}
	return missing, nil
}
