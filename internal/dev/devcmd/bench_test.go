package devcmd

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestMaxUnavailableFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want intstr.IntOrString
		err  bool
	}{
		{in: "100%", want: intstr.FromString("100%")},
		{in: "25%", want: intstr.FromString("25%")},
		{in: "50", want: intstr.FromInt32(50)},
		{in: "0", err: true},
		{in: "0%", err: true},
		{in: "101%", err: true},
		{in: "-3", err: true},
		{in: "a%", err: true},
		{in: "many", err: true},
	} {
		var v intstr.IntOrString
		err := intOrPercent{&v}.Set(tc.in)
		if tc.err {
			if err == nil {
				t.Errorf("Set(%q) = %v, want an error", tc.in, v)
			}
			continue
		}
		if err != nil || v != tc.want {
			t.Errorf("Set(%q) = %v, %v; want %v", tc.in, v, err, tc.want)
		}
	}
}
