package kubeletstub

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestRegisterRejects(t *testing.T) {
	dir := t.TempDir()
	k, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	conn, err := grpc.NewClient("unix://"+k.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pluginapi.NewRegistrationClient(conn)

	for name, tc := range map[string]struct {
		req  *pluginapi.RegisterRequest
		want string
	}{
		"old version":        {req: &pluginapi.RegisterRequest{Version: "v1alpha", ResourceName: "example.com/x", Endpoint: "x.sock"}, want: `unsupported device plugin API version "v1alpha"`},
		"unqualified name":   {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "gpu", Endpoint: "x.sock"}, want: `"gpu" is not an extended resource name`},
		"kubernetes.io name": {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "kubernetes.io/gpu", Endpoint: "x.sock"}, want: "not an extended resource name"},
		"invalid name":       {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "nvidia.com/mig-1g.10gb+me", Endpoint: "x.sock"}, want: `resource name "nvidia.com/mig-1g.10gb+me"`},
		"endpoint with path": {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "example.com/x", Endpoint: "/tmp/x.sock"}, want: "is not a socket name"},
		"nothing listening":  {req: &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: "example.com/x", Endpoint: "x.sock"}, want: "getting options of example.com/x"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := client.Register(ctx, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Register error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	st := k.State()
	if len(st.Registrations) != 0 || len(st.Rejected) != 6 {
		t.Errorf("state after rejections: %d registrations, %d rejected; want 0 and 6", len(st.Registrations), len(st.Rejected))
	}
	if _, err := k.Allocate(context.Background(), "example.com/x", "a"); err == nil {
		t.Error("Allocate without a registered plugin succeeded")
	}
}
