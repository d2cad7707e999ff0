package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/crishim/crishim/shim/crishimv1"
)

// versionInfo is `crishimctl version -o json`, named as kubectl version's.
type versionInfo struct {
	ClientVersion clientVersion  `json:"clientVersion"`
	ServerVersion *serverVersion `json:"serverVersion,omitempty"`
}

type clientVersion struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

type serverVersion struct {
	Version           string `json:"version"`
	RuntimeName       string `json:"runtimeName"`
	RuntimeVersion    string `json:"runtimeVersion"`
	RuntimeAPIVersion string `json:"runtimeApiVersion"`
}

func newVersionCommand(g *globals) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show crishimctl's version and crishim's",
		Long: `Show crishimctl's version and, from crishim's status, crishim's and its runtime's.
As kubectl version: when crishim cannot be reached, the client's version is printed
and the command fails (exit 1) saying why; --client asks for the client only.`,
		Example: `  crishimctl version
  crishimctl version --client
  crishimctl version -o json`,
		Args: noArgs,
	}
	o := addOutputFlag(cmd)
	cmd.Flags().BoolVar(&clientOnly, "client", false, "crishimctl's version only; do not ask crishim")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		v := versionInfo{ClientVersion: clientVersion{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}}
		var callErr error
		if !clientOnly {
			callErr = g.call(cmd, func(ctx context.Context, conn *grpc.ClientConn) error {
				resp, err := crishimv1.NewCrishimClient(conn).Status(ctx, &crishimv1.StatusRequest{})
				if err != nil {
					return g.explain("server version", err)
				}
				v.ServerVersion = &serverVersion{Version: resp.GetVersion(), RuntimeName: resp.GetRuntimeName(), RuntimeVersion: resp.GetRuntimeVersion(), RuntimeAPIVersion: resp.GetRuntimeApiVersion()}
				return nil
			})
		}
		if err := printValue(cmd.OutOrStdout(), *o, v, func(w io.Writer) error { return versionTable(w, v) }); err != nil {
			return err
		}
		return callErr
	}
	return cmd
}

func versionTable(w io.Writer, v versionInfo) error {
	if _, err := fmt.Fprintf(w, "Client Version: %s\n", v.ClientVersion.Version); err != nil {
		return err
	}
	if s := v.ServerVersion; s != nil {
		runtime := "not ready"
		if s.RuntimeName != "" {
			runtime = fmt.Sprintf("%s %s (CRI %s)", s.RuntimeName, s.RuntimeVersion, s.RuntimeAPIVersion)
		}
		_, err := fmt.Fprintf(w, "Server Version: %s\nRuntime: %s\n", s.Version, runtime)
		return err
	}
	return nil
}
