package alloc
import ("testing";"fmt";"math/rand";"time";"os";"path/filepath")
func TestHangSearch(t *testing.T) {
	dir := os.Getenv("CORPUS")
	files, _ := filepath.Glob(dir + "/*")
	var corpus [][]byte
	for _, f := range files {
		b, _ := os.ReadFile(f)
		// format: go test fuzz v1\n[]byte("...")
		corpus = append(corpus, b)
	}
	_ = corpus
	rng := rand.New(rand.NewSource(1))
	ft := &testing.F{}
	_ = ft
	for i := 0; i < 200000; i++ {
		n := rng.Intn(200)
		data := make([]byte, n)
		rng.Read(data)
		done := make(chan struct{})
		go func() {
			defer close(done)
			fuzzAllocator(t, data)
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			fmt.Printf("HANG %#v\n", data)
			os.Exit(3)
		}
	}
}
