package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// apiConst is a string constant of the package: its name, value and file.
type apiConst struct {
	name, value, file string
	// block is the index of its const block among its file's
	// declarations.
	block int
}

// stringConsts parses the package's non-test Go files and returns their
// untyped or typed string constants with a literal value, in source order.
func stringConsts(t *testing.T) []apiConst {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []apiConst
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "zz_generated") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for j, id := range vs.Names {
					if j >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[j].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, apiConst{name: id.Name, value: v, file: name, block: i})
				}
			}
		}
	}
	return out
}

// Condition types and reasons are API: users' alerts match their values.
// Each constant says its value (ReasonProgressing = "Progressing", never
// ReasonNotPaused), and all of them are in conditions.go, so a reader
// finds every reason of a condition in its block.
func TestReasonAndConditionConstantsAreNamedForTheirValues(t *testing.T) {
	n := 0
	for _, c := range stringConsts(t) {
		prefix := ""
		switch {
		case strings.HasPrefix(c.name, "Reason"):
			prefix = "Reason"
		case strings.HasPrefix(c.name, "Condition"):
			prefix = "Condition"
		default:
			if c.file == "conditions.go" {
				t.Errorf("%s in conditions.go is neither a condition type (Condition…) nor a reason (Reason…)", c.name)
			}
			continue
		}
		if c.file != "conditions.go" {
			t.Errorf("%s is declared in %s; declare it in conditions.go, in the block of its condition", c.name, c.file)
		}
		if want := prefix + c.value; c.name != want {
			t.Errorf("%s = %q: name it %s", c.name, c.value, want)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no condition or reason constant found: the test reads the wrong directory")
	}
}

// conditionReasons returns, for each const block of conditions.go that
// declares a condition type, the type's value and the values of the
// reasons declared with it. Blocks of Event reasons declare no type and
// are left out.
func conditionReasons(consts []apiConst) map[string][]string {
	types := map[int]string{}
	out := map[string][]string{}
	for _, c := range consts {
		if c.file == "conditions.go" && strings.HasPrefix(c.name, "Condition") {
			types[c.block] = c.value
			out[c.value] = nil
		}
	}
	for _, c := range consts {
		if typ, ok := types[c.block]; ok && c.file == "conditions.go" && strings.HasPrefix(c.name, "Reason") {
			out[typ] = append(out[typ], c.value)
		}
	}
	return out
}

// conditionsTables reads the tables of docs/protocol.md's Conditions
// section: for each row, the condition (the first cell) and the CamelCase
// words quoted in its other cells.
func conditionsTables(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Conditions\n")
	if !ok {
		t.Fatal(`docs/protocol.md has no "## Conditions" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	quoted := regexp.MustCompile("`([A-Z][A-Za-z]*)`")
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 3 {
			continue
		}
		typ := quoted.FindStringSubmatch(cells[1])
		if typ == nil {
			continue // a header or a separator
		}
		var words []string
		for _, m := range quoted.FindAllStringSubmatch(strings.Join(cells[2:], "|"), -1) {
			words = append(words, m[1])
		}
		if _, dup := rows[typ[1]]; dup {
			t.Errorf("docs/protocol.md lists condition %s twice", typ[1])
		}
		rows[typ[1]] = words
	}
	return rows
}

// docs/protocol.md's tables of conditions are the user's list of what a
// status can say: every condition type has a row, every reason declared
// with a condition in conditions.go is in that condition's row, and every
// word the tables quote is a reason of some condition (a reason only
// Events carry is not one), a drain reason (the Draining condition's True
// reasons) or a condition type.
func TestConditionsTablesListEveryReason(t *testing.T) {
	consts := stringConsts(t)
	declared := conditionReasons(consts)
	rows := conditionsTables(t)
	known := map[string]bool{}
	for typ, reasons := range declared {
		known[typ] = true
		for _, r := range reasons {
			known[r] = true
		}
	}
	for _, c := range consts {
		if strings.HasPrefix(c.name, "DrainReason") {
			known[c.value] = true
		}
	}
	if len(declared) == 0 || len(rows) == 0 {
		t.Fatalf("found %d conditions in conditions.go and %d rows in docs/protocol.md: the test reads the wrong files", len(declared), len(rows))
	}
	for _, typ := range slices.Sorted(maps.Keys(declared)) {
		reasons := declared[typ]
		words, ok := rows[typ]
		if !ok {
			t.Errorf("docs/protocol.md's Conditions tables have no row for condition %s", typ)
			continue
		}
		for _, r := range reasons {
			if !slices.Contains(words, r) {
				t.Errorf("docs/protocol.md's row for %s does not list reason %s (declared with it in conditions.go)", typ, r)
			}
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(rows)) {
		words := rows[typ]
		if _, ok := declared[typ]; !ok {
			t.Errorf("docs/protocol.md lists condition %s, which conditions.go does not declare", typ)
		}
		for _, w := range words {
			if !known[w] {
				t.Errorf("docs/protocol.md's row for %s quotes %s, which is no condition reason, drain reason or condition type of conditions.go", typ, w)
			}
		}
	}
}
