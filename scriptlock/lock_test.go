package scriptlock

import (
	"reflect"
	"testing"
)

func rg(s, e uint64, t uint32) Range { return Range{s, e, t} }

func TestApply(t *testing.T) {
	cases := []struct {
		name string
		own  []Range
		req  Range
		want []Range
	}{
		{"add", nil, rg(0, 9, Write), []Range{rg(0, 9, Write)}},
		{"unlock nothing", nil, rg(0, MaxEnd, Unlock), nil},
		{"unlock all", []Range{rg(0, 9, Write), rg(20, 29, Read)}, rg(0, MaxEnd, Unlock), nil},
		{"split by unlock", []Range{rg(0, 99, Write)}, rg(10, 19, Unlock),
			[]Range{rg(0, 9, Write), rg(20, 99, Write)}},
		{"split by other type", []Range{rg(0, 99, Read)}, rg(10, 19, Write),
			[]Range{rg(0, 9, Read), rg(10, 19, Write), rg(20, 99, Read)}},
		{"merge adjacent", []Range{rg(0, 9, Write)}, rg(10, 19, Write), []Range{rg(0, 19, Write)}},
		{"merge overlapping", []Range{rg(0, 9, Read), rg(20, 29, Read)}, rg(5, 25, Read), []Range{rg(0, 29, Read)}},
		{"no merge of types", []Range{rg(0, 9, Read)}, rg(10, 19, Write), []Range{rg(0, 9, Read), rg(10, 19, Write)}},
		{"convert whole", []Range{rg(0, MaxEnd, Read)}, rg(0, MaxEnd, Write), []Range{rg(0, MaxEnd, Write)}},
		{"to end", []Range{rg(0, 9, Write)}, rg(5, MaxEnd, Read), []Range{rg(0, 4, Write), rg(5, MaxEnd, Read)}},
		{"cut tail", []Range{rg(0, MaxEnd, Write)}, rg(100, MaxEnd, Unlock), []Range{rg(0, 99, Write)}},
	}
	for _, c := range cases {
		if got := Apply(c.own, c.req); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Apply(%v, %v) = %v, want %v", c.name, c.own, c.req, got, c.want)
		}
	}
}

func TestConflicts(t *testing.T) {
	cases := []struct {
		a, b Range
		want bool
	}{
		{rg(0, 9, Read), rg(0, 9, Read), false},
		{rg(0, 9, Read), rg(5, 15, Write), true},
		{rg(0, 9, Write), rg(9, 9, Read), true},
		{rg(0, 9, Write), rg(10, 19, Write), false},
		{rg(0, MaxEnd, Write), rg(1<<40, 1<<40, Read), true},
	}
	for _, c := range cases {
		if got := c.a.Conflicts(c.b); got != c.want {
			t.Errorf("%v vs %v: %v, want %v", c.a, c.b, got, c.want)
		}
		if got := c.b.Conflicts(c.a); got != c.want {
			t.Errorf("%v vs %v: %v, want %v", c.b, c.a, got, c.want)
		}
	}
	if _, ok := FirstConflict([]Range{rg(0, 9, Read), rg(20, 29, Write)}, rg(25, 25, Read)); !ok {
		t.Error("FirstConflict missed a write lock")
	}
}
