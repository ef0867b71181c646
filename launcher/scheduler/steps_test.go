package scheduler

import (
	"reflect"
	"strconv"
	"testing"
)

func TestParseSlurmSteps(t *testing.T) {
	p := func(run string) string { return strconv.Itoa(StorePort(run)) }
	out := "77.batch n1\n77.extern n[1-4]\n77.0 n[1-4]\n77.1 n[2-3]\n77.2 n4\n78.0 m1\n77.3 n5\n\n garbage\n"
	got, err := parseSlurmSteps("77", "77.3", out)
	if err != nil {
		t.Fatal(err)
	}
	want := []SlurmStep{
		{RunID: "77.0", Nodes: 4, Endpoints: []string{"n1:" + p("77.0"), "n2:" + p("77.0"), "n3:" + p("77.0")}},
		{RunID: "77.1", Nodes: 2, Endpoints: []string{"n2:" + p("77.1")}},
		{RunID: "77.2", Nodes: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseSlurmSteps = %+v\nwant %+v", got, want)
	}
	if _, err := parseSlurmSteps("77", "", "77.0 n[1-"); err == nil {
		t.Error("a bad node list was accepted")
	}
}
