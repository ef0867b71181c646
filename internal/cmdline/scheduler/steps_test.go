package scheduler

import (
	"reflect"
	"strconv"
	"testing"
)

func TestParseSlurmSteps(t *testing.T) {
	p := func(run string) string { return strconv.Itoa(StorePort(run)) }
	out := "77.batch n1 batch\n77.extern n[1-4] extern\n77.0 n[1-4] gorun\n77.1 n[2-3] my prep step\n77.2 n4 gorun-etcd\n78.0 m1 gorun\n77.3 n5 gorun\n77.4 n6\n\n garbage\n"
	got, err := parseSlurmSteps("77", "77.3", out)
	if err != nil {
		t.Fatal(err)
	}
	want := []SlurmStep{
		{RunID: "77.0", Nodes: 4, Endpoints: []string{"n1:" + p("77.0"), "n2:" + p("77.0"), "n3:" + p("77.0")}, Name: "gorun"},
		{RunID: "77.1", Nodes: 2, Endpoints: []string{"n2:" + p("77.1")}, Name: "my prep step"},
		{RunID: "77.2", Nodes: 1, Name: "gorun-etcd"},
		{RunID: "77.4", Nodes: 1},
	}
	for _, s := range got {
		if s.IsGorun() != (s.Name == "gorun" || s.Name == "gorun-etcd") {
			t.Errorf("step %s named %q: IsGorun %v", s.RunID, s.Name, s.IsGorun())
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseSlurmSteps = %+v\nwant %+v", got, want)
	}
	if _, err := parseSlurmSteps("77", "", "77.0 n[1-"); err == nil {
		t.Error("a bad node list was accepted")
	}
}
