// Package mergepatch writes the part of a JSON merge patch (RFC 7386)
// that replaces a nested object whole.
//
// A merge patch keeps every key of the stored object that it does not
// mention, and a field tagged omitempty is not mentioned when it is empty:
// a plain json.Marshal of a struct, sent as a merge patch, merges the new
// value over the old one instead of replacing it. A cleared field then
// never reaches the API server (a count back at 0, a withdrawn request ID,
// the last activity of an earlier pod), and a controller that compares
// what it wrote with what it reads back finds them different forever.
package mergepatch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// Whole encodes v so that, as the value of a key in a merge patch, it
// replaces the stored object whole: every field of T's struct is present,
// one that json.Marshal leaves out as empty written as null, which removes
// it. A nil v is null, which removes the object itself.
//
// Only v's own fields are made whole: a struct nested in one of them is
// encoded as json.Marshal encodes it, and merges over the stored one.
// T must be a struct with no embedded fields, whose fields json.Marshal
// would promote and Whole would not see.
func Whole[T any](v *T) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage("null"), nil
	}
	keys, err := fieldKeys(reflect.TypeFor[T]())
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, ok := fields[k]; !ok {
			fields[k] = json.RawMessage("null")
		}
	}
	return json.Marshal(fields)
}

// fieldKeys returns the JSON key of every field of struct type t that
// json.Marshal may write: the name of its json tag, or the Go name of an
// exported field whose tag names none; not a field tagged "-" nor an
// unexported one, which it never writes.
func fieldKeys(t reflect.Type) ([]string, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("mergepatch: %s is not a struct", t)
	}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil, fmt.Errorf("mergepatch: %s embeds %s, whose fields Whole does not see", t, f.Type)
		}
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys, nil
}
