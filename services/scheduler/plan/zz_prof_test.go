package plan

import "testing"

func BenchmarkZZPlanOnly(b *testing.B) {
	tasks := benchGraph(100_000, 1_000_000)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Plan(tasks, 32); err != nil {
			b.Fatal(err)
		}
	}
}
