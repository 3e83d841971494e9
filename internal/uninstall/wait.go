package uninstall

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// waitGone waits, by watching, until no object lw lists is left that
// counts (count nil: every object). It returns the names still left when
// ctx ends, in an error that names them and the fix.
func waitGone(ctx context.Context, what string, lw cache.ListerWatcher, obj runtime.Object, counts func(runtime.Object) bool) error {
	var store cache.Store
	left := func() []string {
		var names []string
		for _, o := range store.List() {
			if counts != nil && !counts(o.(runtime.Object)) {
				continue
			}
			if m, err := meta.Accessor(o); err == nil {
				names = append(names, m.GetName())
			}
		}
		slices.Sort(names)
		return names
	}
	pre := func(s cache.Store) (bool, error) {
		store = s
		return len(left()) == 0, nil
	}
	// The informer's store has taken in each event before the condition
	// sees it.
	cond := func(watch.Event) (bool, error) { return len(left()) == 0, nil }
	_, err := watchtools.UntilWithSync(ctx, lw, obj, pre, cond)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil || errors.Is(err, watchtools.ErrWatchClosed) {
		var names []string
		if store != nil {
			names = left()
		}
		return fmt.Errorf("%s still there when the wait ended (%w): %s; run npu-hooks uninstall again (it carries on where it stopped), with a longer --timeout if a driver pod is still installing a driver",
			what, err, strings.Join(names, ", "))
	}
	return fmt.Errorf("wait for %s to be gone: %w", what, err)
}
