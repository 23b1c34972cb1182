// Types of the gatehouse client (index.js).

/** A gate as every read returns it (the contract's `GateView`). */
export interface GateView {
  session_id: string;
  /** The loop that asked (a host-owned gate, a form or open-URL one, has none). */
  loop_id?: string;
  state: 'open' | 'resolved' | 'closed';
  gate: { id: string; kind: string; prompt: { title: string; body: string }; [member: string]: unknown };
  opened_seq: number;
  opened_at: string;
  deadline?: string;
  resolved_seq?: number;
  resolution?: Record<string, unknown>;
  /** An `ask` gate's answer. */
  answer?: string;
  /** A decided gate's decision: a permission gate's, or a form's or open-URL gate's. */
  decision?: PermissionDecision | FormDecision;
}

/** How a person answered a form or open-URL gate: submitted (or confirmed), declined, or dismissed (also a timeout's answer). */
export type FormAction = 'accept' | 'decline' | 'cancel';

/** The `decision` of an answered form or open-URL gate's view, as the server gives it. */
export interface FormDecision {
  action: FormAction;
  /** A form's values, typed as its fields are (accepted forms only). */
  values?: Record<string, unknown>;
  source: 'user' | 'policy';
  principal?: string;
  decided_at: string;
}

/** A form's field in harness shape (what a JSON Schema is translated into). */
export interface FormField {
  name: string;
  label?: string;
  kind: 'text' | 'email' | 'url' | 'date' | 'date_time' | 'select' | 'multi_select' | 'confirm' | 'number' | 'integer' | 'group' | 'list';
  required?: boolean;
  options?: Array<{ value: string; label?: string }>;
  description?: string;
  default?: unknown;
  min_length?: number;
  max_length?: number;
  minimum?: number;
  maximum?: number;
  min_items?: number;
  max_items?: number;
  /** A group's or list's nested fields. */
  fields?: FormField[];
}

/** What `form` asks for: harness fields, or a JSON Schema of an object in the subset gatehouse enforces. */
export type FormSchema = { fields: FormField[] } | Record<string, unknown>;

/** How a person (or the policy, at the deadline) answered a form, as `form` resolves it. */
export interface FormResult {
  action: FormAction;
  /** The submitted values, typed as the fields are (null unless accepted). */
  values: Record<string, unknown> | null;
  /** Who answered, when the server knows (their token's name). */
  principal: string | null;
  /** 'user', or 'policy' for the answer at the deadline. */
  source: 'user' | 'policy';
  /** The gate that asked. */
  gateId: string;
  /** The gate's final view. */
  view: GateView;
}

/** How a person (or the policy) answered an open-URL gate, as `openUrl` resolves it. */
export interface OpenUrlResult {
  /** 'accept' (done, or completed when completion was required), 'decline' or 'cancel'. */
  action: FormAction;
  principal: string | null;
  source: 'user' | 'policy';
  gateId: string;
  view: GateView;
}

export interface FormOptions {
  /** The heading the person reads (else the server's "Input requested"). */
  title?: string;
  /** Seconds: the server answers `cancel` then. */
  timeout?: number;
  /** The session the gate goes into (default: a fresh one). */
  session?: string;
  /** Stops waiting and withdraws the gate (abandoned). */
  signal?: AbortSignal;
}

export interface OpenUrlOptions extends FormOptions {
  /** Whether the person confirms having completed it ("I have completed it"), not just "Done". */
  requiresCompletion?: boolean;
}

/** The `decision` of a decided permission gate's view, as the server gives it. */
export interface PermissionDecision {
  effect: 'approve' | 'deny';
  action: string;
  /** The input the call runs with (approvals only). */
  tool_input?: Record<string, unknown>;
  edited: boolean;
  reason?: string;
  source: 'user' | 'policy';
  principal?: string;
  decided_at: string;
}

/** How a person (or the gate's policy) decided a tool call, as `approveToolCall` resolves it. */
export interface Decision {
  /** Whether the call may run. A denial is false, also one by the policy at the deadline. */
  approved: boolean;
  /** The input to run the call with: the approver's edit, or the input as asked (also for a denial). */
  toolInput: Record<string, unknown> | null;
  /** Whether the approver changed the input. */
  edited: boolean;
  /** A denial's reason, when the person gave one. */
  reason: string | null;
  /** Who decided, when the server knows (their token's name); null for the policy. */
  principal: string | null;
  /** Whether the gate's policy decided (at its deadline), not a person. */
  byPolicy: boolean;
  /** The control chosen: 'Approve', 'Approve always for this workspace' or 'Deny'. */
  action: string;
  /** The gate that asked. */
  gateId: string;
  /** The gate's final view. */
  view: GateView;
}

/** A tool call's requirement: a plain description, or the harness's structured one. */
export type Requirement =
  | string
  | {
      kind: string;
      scope?: string;
      match: string;
      description: string;
      grant_class?: string;
      grant_target?: string;
      candidates?: Array<{ kind: string; match: string; description: string; grant_class?: string; grant_target?: string }>;
    };

export interface ApproveToolCallOptions {
  /** The JSON Schema of the tool input; an edit must fit it. */
  schema?: Record<string, unknown>;
  /** Whether the approver may edit the input (it needs one). */
  editable?: boolean;
  risk?: 'low' | 'medium' | 'high' | 'critical';
  /** Seconds: the server denies the call then; without it, its default (5 minutes). */
  timeout?: number;
  /** The first line the person reads (else the tool's name). */
  summary?: string;
  /** The capabilities the call needs. */
  requirements?: Requirement[];
  /** The session the gate goes into (default: a fresh one). */
  session?: string;
  /** The agent loop asking (default: a fresh one). */
  loopId?: string;
  /** This tool call's id (default: a fresh one): with the same session and loop, a re-call finds its gate. */
  toolExecutionId?: string;
  /** Stops waiting (the gate stays open). */
  signal?: AbortSignal;
}

/** One journal event: its seq (the SSE id), its type, and the event itself. */
export interface JournalEvent {
  seq: number;
  type: string;
  event: Record<string, unknown>;
}

export interface ClientOptions {
  /** A bearer token from the server's tokens file. */
  token?: string;
  /** Another fetch (a test double, a fetch with a proxy). */
  fetch?: typeof fetch;
}

export interface AskOptions {
  /** Answers to choose from; without them the answer is free text. */
  choices?: string[];
  /** With choices: also accept an answer that is none of them. */
  allowOther?: boolean;
  /** Seconds: the server answers `default` then; without a default the gate is withdrawn. */
  timeout?: number;
  /** The answer at the deadline. */
  default?: string;
  /** The session the gate goes into (default: a fresh one). */
  session?: string;
  /** Stops waiting (the gate stays open). */
  signal?: AbortSignal;
}

export declare class Client {
  constructor(url?: string, options?: ClientOptions);
  readonly url: string;
  /** Asks a person and resolves to the answer (Withdrawn or TimedOut otherwise). */
  ask(question: string, options?: AskOptions): Promise<string>;
  /** Answers a gate by its id; resolves to the answer's journal seq (GateConflict when too late). */
  answer(gateId: string, answer: string, options?: { idempotencyKey?: string }): Promise<number>;
  /** Asks whether a tool call may run; resolves to the Decision (a denial too; Withdrawn rejects). */
  approveToolCall(toolName: string, toolInput: Record<string, unknown> | null, options?: ApproveToolCallOptions): Promise<Decision>;
  /** Asks a person to fill in a form; resolves to the FormResult (a decline or cancel too; Withdrawn rejects). */
  form(schema: FormSchema, body: string, options?: FormOptions): Promise<FormResult>;
  /** Asks a person to open a URL (a secret only the answer side reads); resolves to the OpenUrlResult. */
  openUrl(url: string, body: string, options?: OpenUrlOptions): Promise<OpenUrlResult>;
  /** Approves a permission gate (with `toolInput`: that edit); resolves to the journal seq. */
  approve(gateId: string, options?: { toolInput?: Record<string, unknown>; always?: boolean; idempotencyKey?: string }): Promise<number>;
  /** Denies a permission gate, with `reason` for the agent; resolves to the journal seq. */
  deny(gateId: string, options?: { reason?: string; idempotencyKey?: string }): Promise<number>;
  /** The gates in `state` (comma-separated; null for all), of every session or of `session`. */
  gates(options?: { state?: string | null; session?: string }): Promise<GateView[]>;
  /** Every journal event after `after`, then live ones; resumes by Last-Event-ID by itself. */
  events(options?: { after?: number; session?: string; signal?: AbortSignal }): AsyncGenerator<JournalEvent, void, undefined>;
}

export interface ErrorOptions {
  status?: number;
  code?: string;
  retryable?: boolean;
  body?: Record<string, unknown>;
}

export declare class GatehouseError extends Error {
  constructor(message: string, options?: ErrorOptions);
  readonly status: number;
  readonly code: string;
  readonly retryable: boolean;
  readonly body: Record<string, unknown>;
  readonly error: Record<string, unknown>;
}
export declare class Unreachable extends GatehouseError {
  constructor(url: string, cause: string, options?: { maybeSent?: boolean });
  readonly url: string;
  /** False when the request surely never reached the server (no connection was made). */
  readonly maybeSent: boolean;
}
export declare class InvalidRequest extends GatehouseError {
  readonly fields: Array<{ path: string; code: string; message: string }>;
}
export declare class Unauthorized extends GatehouseError {}
export declare class Forbidden extends GatehouseError {}
export declare class NotFound extends GatehouseError {}
export declare class GateConflict extends GatehouseError {
  /** The winning GateResolved event. */
  readonly resolution: Record<string, unknown>;
}
export declare class ReaskConflict extends GatehouseError {
  readonly gate: GateView;
}
export declare class IdempotencyConflict extends GatehouseError {}
export declare class RateLimited extends GatehouseError {
  readonly retryAfter: number;
}
export declare class Unavailable extends GatehouseError {}
export declare class ServerError extends GatehouseError {}
export declare class Withdrawn extends GatehouseError {
  constructor(view: GateView);
  readonly view: GateView;
}
export declare class TimedOut extends GatehouseError {
  constructor(gateId: string);
  readonly gateId: string;
}
export declare class StreamReset extends GatehouseError {
  constructor(earliest: number, head: number);
  readonly earliest: number;
  readonly head: number;
}

/** The Server-Sent Events parser `events` uses. */
export declare class SseParser {
  feed(chunk: Uint8Array): Array<{ event: string; data: string; id?: string }>;
}
