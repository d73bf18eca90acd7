package sim

// kind is what an event does.
type kind uint8

const (
	evPass        kind = iota + 1 // a client starts a failover pass
	evArrive                      // an attach request reaches a supernode
	evAnswer                      // the answer (or the failure) reaches the client
	evSessionDead                 // a client declares its supernode dead
	evReturn                      // an attached client away from home looks for room there
	evAnnounce                    // a supernode announces
	evHealth                      // a supernode's overload check (every keepalive)
	evRelease                     // a supernode frees the slot of a session nobody uses
	evDirTick                     // the directory expires entries, the ring is rebuilt
	evSample                      // the report samples the network
	evCrash                       // the scenario crashes supernodes
	evRestart                     // a client process restarts (restart-wave)
	evHandBack                    // the crashed supernodes restart
	evDemote                      // the operator demotes the megas
	evDrainStep                   // a demoted mega hands back one step's clients
	evRoleEval                    // an auto node evaluates its role (autoroles.go)
	evAutoDrain                   // a demoting auto supernode hands back one step's clients
)

// event is one scheduled action, held by value in the vtime queue. gen
// invalidates events of a client (or supernode incarnation) whose state
// moved on.
type event struct {
	at  int64 // virtual nanoseconds, as the queue has it
	k   kind
	st  uint8 // answer status
	a   int32 // client, or supernode for supernode events
	b   int32 // supernode
	gen uint32
}
