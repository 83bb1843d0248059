package azure

import (
	"bytes"
	"context"
	"encoding/base64"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/cmdq-dev/cmdq/storage"
)

type noToken struct{}

func (noToken) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, nil
}

// TestSharedSecret: processes with the same account key derive the same
// secret however they give it; another key or no key gives another or
// none; the key is not in it.
func TestSharedSecret(t *testing.T) {
	open := func(cfg Config) []byte {
		t.Helper()
		st, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		return storage.SharedSecret(st)
	}
	otherKey := base64.StdEncoding.EncodeToString([]byte("another key of sixty-four bytes, more or less, for this test...."))
	dev := open(Config{ConnectionString: DevConnectionString})
	if len(dev) != 32 {
		t.Fatalf("the development account's secret has %d bytes, want 32", len(dev))
	}
	for name, got := range map[string][]byte{
		"UseDevelopmentStorage=true": open(Config{ConnectionString: "UseDevelopmentStorage=true"}),
		"AccountName and AccountKey": open(Config{AccountName: DevAccountName, AccountKey: DevAccountKey, QueueEndpoint: "http://127.0.0.1:1/a", TableEndpoint: "http://127.0.0.1:2/a"}),
	} {
		if !bytes.Equal(got, dev) {
			t.Errorf("%s: another secret than the connection string's", name)
		}
	}
	if other := open(Config{AccountName: DevAccountName, AccountKey: otherKey}); other == nil || bytes.Equal(other, dev) {
		t.Error("another key gave no secret, or the same one")
	}
	if none := open(Config{AccountName: DevAccountName, Credential: noToken{}}); none != nil {
		t.Errorf("an Entra ID credential gave a secret: %x", none)
	}
	key, _ := base64.StdEncoding.DecodeString(DevAccountKey)
	if bytes.Contains(dev, key[:16]) {
		t.Error("the secret holds the key")
	}
}
