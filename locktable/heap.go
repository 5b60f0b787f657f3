package locktable

import "container/heap"

// expiryHeap orders sessions by deadline, earliest first, so the table can
// tell the server when to look next and expire in O(log n).
type expiryHeap []*session

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *expiryHeap) Push(x any) {
	s := x.(*session)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}
func (h *expiryHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapIdx = -1
	return s
}

func (h *expiryHeap) push(s *session)   { heap.Push(h, s) }
func (h *expiryHeap) fix(s *session)    { heap.Fix(h, s.heapIdx) }
func (h *expiryHeap) remove(s *session) { heap.Remove(h, s.heapIdx) }
