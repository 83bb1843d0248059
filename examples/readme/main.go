// Command readme is the README's "Use it from Go" program: the README's Go
// block is the region between the README:begin and README:end lines below,
// and readme_test.go keeps the two equal, builds and runs it.
//
//	go run ./examples/readme   # a data directory ./cmdq-data in the current directory
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/cmdq-dev/cmdq"
	"github.com/cmdq-dev/cmdq/storage/embedded"
)

// README:begin
type ResizeImage struct {
	URL   string `json:"url"`
	Width int    `json:"width"`
}

func (ResizeImage) CommandType() string { return "images.resize" }

func main() {
	ctx := context.Background()
	st, err := embedded.Open("./cmdq-data", nil) // or azure.Open(ctx, azure.Config{ConnectionString: …})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	c, err := cmdq.New(st, cmdq.Config{}) // every field has a default: prefix "cmdq", 32 handlers at once, …
	if err != nil {
		log.Fatal(err)
	}
	err = cmdq.Register(c, func(ctx context.Context, cmd ResizeImage, run *cmdq.Attempt) error {
		// run.LastStep() and run.CompleteStep(ctx, n, note) make multi-step work resumable;
		// return cmdq.Permanent(err) for what retrying cannot fix, and
		// cmdq.RetryAfter(d, err) to retry after d without spending an attempt (a 429).
		return resize(ctx, cmd.URL, cmd.Width)
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil { // opens queues and tables, then processes in the background
		log.Fatal(err)
	}
	defer c.Stop(ctx) // drains running handlers

	res, err := c.Issue(ctx, ResizeImage{URL: "https://example.com/a.png", Width: 640})
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Wait(ctx, res.ID) // s.State: completed, poisoned, …
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Type, s.State)
}

// README:end

// resize stands for the real work.
func resize(ctx context.Context, url string, width int) error { return ctx.Err() }
