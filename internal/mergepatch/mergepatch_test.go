package mergepatch

import (
	"encoding/json"
	"testing"
)

type inner struct {
	A string `json:"a,omitempty"`
	B string `json:"b,omitempty"`
}

type object struct {
	Name     string   `json:"name,omitempty"`
	Count    int32    `json:"count,omitempty"`
	Always   int32    `json:"always"`
	Optional *string  `json:"optional,omitempty"`
	List     []string `json:"list,omitempty"`
	Nested   *inner   `json:"nested,omitempty"`
	Value    inner    `json:"value"`
	Untagged string
	Bare     string `json:",omitempty"`
	Skipped  string `json:"-"`
	hidden   string
}

func decode(t *testing.T, b json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("Whole wrote %s: %v", b, err)
	}
	return m
}

func TestWholeOfNilRemovesTheObject(t *testing.T) {
	b, err := Whole[object](nil)
	if err != nil || string(b) != "null" {
		t.Errorf("Whole(nil) = %s, %v; want null", b, err)
	}
}

// Every field json.Marshal leaves out as empty is in the patch as null, so
// the patch removes what the stored object held there.
func TestWholeWritesEveryEmptyFieldAsNull(t *testing.T) {
	b, err := Whole(&object{Name: "n", hidden: "h"})
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, b)
	want := map[string]string{
		"name": `"n"`, "count": "null", "always": "0", "optional": "null", "list": "null",
		"nested": "null", "value": "{}", "Untagged": `""`, "Bare": "null",
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("%s = %s, want %s (patch %s)", k, got[k], v, b)
		}
	}
	if len(got) != len(want) {
		t.Errorf("patch %s has %d keys, want %d: a field tagged \"-\" or unexported is never written", b, len(got), len(want))
	}
}

// A struct inside a field is encoded as json.Marshal encodes it: only the
// object given is made whole.
func TestWholeLeavesNestedStructsAsMarshalled(t *testing.T) {
	b, err := Whole(&object{Nested: &inner{A: "x"}, Value: inner{B: "y"}})
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, b)
	if string(got["nested"]) != `{"a":"x"}` || string(got["value"]) != `{"b":"y"}` {
		t.Errorf("nested = %s, value = %s; want them as json.Marshal writes them", got["nested"], got["value"])
	}
}

// An embedded struct's fields are promoted by json.Marshal where Whole
// would not null them: Whole refuses the type rather than write a patch
// that merges.
func TestWholeRefusesWhatItCannotMakeWhole(t *testing.T) {
	type embeds struct {
		inner
		C string `json:"c,omitempty"`
	}
	if b, err := Whole(&embeds{}); err == nil {
		t.Errorf("Whole(struct with an embedded field) = %s, want an error", b)
	}
	s := "s"
	if b, err := Whole(&s); err == nil {
		t.Errorf("Whole(*string) = %s, want an error", b)
	}
}
