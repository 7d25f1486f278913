package routing_test

import (
	"fmt"
	"time"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
)

// An entry routes a request over a committed map and its view of the
// swarm: two nodes share the model with an overlap, and a third holds all
// of it but is draining. b has a long queue, so a runs every layer it can
// before handing over inside b's range.
func Example() {
	model, _ := layers.Model("llama-3-70b")
	r, err := routing.New(routing.WithModel(model))
	if err != nil {
		panic(err)
	}
	m, _ := layers.NewLayerMap(80, 7,
		layers.Stage{Node: "a", Range: layers.Range{Start: 0, End: 48}},
		layers.Stage{Node: "b", Range: layers.Range{Start: 32, End: 80}},
		layers.Stage{Node: "c", Range: layers.Range{Start: 0, End: 80}},
	)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h100, _ := layers.Device("h100")
	v := routing.NewView(
		routing.NodeState{ID: "a", Hardware: h100, FreeKV: 100000, Updated: now},
		routing.NodeState{ID: "b", Hardware: h100, FreeKV: 100000, Updated: now, QueueDepth: 300},
		routing.NodeState{ID: "c", Hardware: h100, FreeKV: 100000, Updated: now, Phase: routing.Draining},
	)
	v.SetRTT("a", "b", 0.004) // measured by a's pings, from its heartbeat

	p, err := r.Route(m, v, routing.Request{Entry: "a", PromptTokens: 120, MaxTokens: 200, Seed: 42}, now)
	if err != nil {
		panic(err)
	}
	fmt.Println(p)
	fmt.Println("epoch", p.Epoch)
	// Output:
	// a[0,48) → b[48,80)
	// epoch 7
}
