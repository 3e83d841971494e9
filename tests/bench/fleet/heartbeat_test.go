package fleet

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A heartbeat loop that fell behind renews every bucket it missed in one
// batch, each node once, and a loop on time renews one bucket's nodes.
func TestDueNodesCatchUpInOneBatch(t *testing.T) {
	const buckets = 10
	var nodes []*corev1.Node
	for i := range 200 {
		nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}})
	}
	bucketOf := map[string]int{}
	inBucket := map[int]int{}
	for _, n := range nodes {
		inBucket[int(bucket(n.Name, buckets))]++
	}
	count := func(from, to int) int {
		seen := map[string]bool{}
		for _, n := range dueNodes(nodes, bucketOf, buckets, from, to) {
			if seen[n.Name] {
				t.Fatalf("[%d, %d): node %s due twice", from, to, n.Name)
			}
			seen[n.Name] = true
		}
		return len(seen)
	}
	for _, tc := range []struct{ from, to, want int }{
		{0, 1, inBucket[0]},
		{13, 14, inBucket[3]},
		{8, 12, inBucket[8] + inBucket[9] + inBucket[0] + inBucket[1]}, // wraps
		{5, 15, len(nodes)},
		{5, 40, len(nodes)},
	} {
		if got := count(tc.from, tc.to); got != tc.want {
			t.Errorf("buckets [%d, %d): %d nodes due, want %d", tc.from, tc.to, got, tc.want)
		}
	}
}
