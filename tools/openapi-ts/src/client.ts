// A front end's use of cmdq's HTTP API through types generated from
// api/openapi.json by openapi-typescript (`make openapi-client` writes
// them to gen/cmdq.d.ts and compiles this file with tsc --noEmit): issue a
// command with params, then read its status. It compiles only if the
// description lets a client pass any JSON object as params and says what
// a status holds.
import type { components, paths } from "../gen/cmdq";

type IssueRequest = components["schemas"]["IssueRequest"];
type IssueResponse = paths["/v1/commands"]["post"]["responses"][202]["content"]["application/json"];
type Status = paths["/v1/commands/{id}"]["get"]["responses"][200]["content"]["application/json"];
type Problem = components["schemas"]["Problem"];

export async function issueAndRead(base: string, token: string): Promise<Status> {
  const req: IssueRequest = {
    type: "images.resize",
    params: { url: "https://example.com/a.png", width: 640, tags: ["thumb"], crop: { x: 0, y: 0 }, keepExif: false, note: null },
    correlationId: "order-1234",
  };
  const headers = { "Content-Type": "application/json", Authorization: `Bearer ${token}` };
  const issued = await fetch(`${base}/v1/commands`, { method: "POST", headers, body: JSON.stringify(req) });
  if (issued.status !== 202 && issued.status !== 200) {
    const p: Problem = await issued.json();
    throw new Error(`${p.title}: ${p.detail ?? ""}`);
  }
  const { id }: IssueResponse = await issued.json();
  const res = await fetch(`${base}/v1/commands/${encodeURIComponent(id)}?wait=10s`, { headers });
  const st: Status = await res.json();
  const state: "pending" | "running" | "retrying" | "completed" | "poisoned" | "discarded" | "cancelled" | "scheduled" | string = st.status;
  const attempts: number = st.attempts;
  console.log(`${st.id} ${st.type} ${state} after ${attempts} attempt(s), created ${st.createdAt}`);
  return st;
}
