// Package items holds the acceptance tests of the item set's sources, run
// as an operator would meet them: real `syncd run` processes over a real
// redis-server, with an items.command source that grows, shrinks, fails
// and prints nothing, and two daemons elected reconciler in turn while
// one is paused mid-reconcile.
package items
