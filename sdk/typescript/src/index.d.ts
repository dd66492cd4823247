// Types of @runledger/worker. The sources are ESM JavaScript; these
// declarations are written by hand beside them and checked by the SDK's
// suite (test/types.test.js compiles an example against them when a
// TypeScript compiler is at hand).

import type { SQSClient } from '@aws-sdk/client-sqs';

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A logger: the worker writes JSON-ready fields with snake_case keys. */
export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

/** The ConditionCheck a TransactWriteItems adds, in the AWS SDK v3 low-level shape. */
export interface FenceCheck {
  ConditionCheck: {
    TableName: string;
    Key: Record<string, { S: string }>;
    ConditionExpression: string;
    ExpressionAttributeNames?: Record<string, string>;
    ExpressionAttributeValues?: Record<string, { S: string } | { N: string }>;
  };
}

/** One claimed attempt as the handler sees it. */
export interface Task {
  /** The job the run belongs to ("" when the envelope has none). */
  readonly job: string;
  readonly run: string;
  readonly task: string;
  readonly attempt: number;
  /** The run's logical time; null when the envelope has none. */
  readonly logicalTime: Date | null;
  /** The attempt's fencing token. */
  readonly token: string;
  readonly pool: string;
  /** The id the claim carried: "<name>@<boot id>". */
  readonly workerId: string;
  /** The task's effective payload; undefined when the job has none. */
  readonly payload: Json | undefined;
  /** The run's params (an object); undefined when none. */
  readonly params: Record<string, Json> | undefined;
  /** The outputs of the direct upstream tasks that succeeded with one, by task. */
  readonly inputs: Record<string, Json>;
  /** A map child's element and its position; undefined for other tasks. */
  readonly item: Json | undefined;
  readonly index: number | undefined;
  /**
   * Aborts when the attempt must stop; its reason is an AttemptStopped
   * (cancel_requested, run_timeout, shutdown, lambda_deadline,
   * attempt_over, lease_lost). A handler that stops for it should throw
   * (signal.throwIfAborted()).
   */
  readonly signal: AbortSignal;
  /**
   * When the worker aborts the signal (lease_lost) unless it renews the
   * lease first: the lease's end less min(5 s, heartbeat timeout / 3).
   * It moves on with every heartbeat.
   */
  readonly fencingDeadline: Date;
  /** Carries run_id, task_id and attempt. */
  readonly log: Logger;
  /** Sets the output a success reports (JSON, at most 16 KiB); throws a FieldError beyond. */
  setOutput(value: Json): void;
  /** Sets the output_ref the completion reports (at most 2 KiB). */
  setOutputRef(ref: string): void;
  /**
   * The ConditionCheck to add to your own TransactWriteItems so that it
   * commits only while this attempt owns its task. Throws when the claim
   * answer carries no fence (an in-memory ledger).
   */
  fence(): FenceCheck;
}

/** The handler: resolve for success; throw to fail (a TaskError says how). */
export type Handler = (task: Task) => unknown | Promise<unknown>;

export interface WorkerOptions {
  handler: Handler;
  /** The pool whose queue to take envelopes from. Default "default". */
  pool?: string;
  /** Attempts run at once. Default 1. */
  concurrency?: number;
  /** Names the worker in claims ("<name>@<boot id>"). Default the host name. No "@". */
  name?: string;
  /** Default RUNLEDGER_API_URL, else the local stack's file. */
  apiUrl?: string;
  /** The pool's queue URL. Default RUNLEDGER_QUEUE_URL, else the local stack's file's queues[pool]. */
  queueUrl?: string;
  /** The events queue URL. Default RUNLEDGER_EVENTS_QUEUE_URL, else the local stack's file's queues.events. */
  eventsQueueUrl?: string;
  /** The SQS client. Default: the local stack's endpoint when its file named the queue, else the AWS SDK's defaults. */
  sqs?: SQSClient;
  /** The local stack's file, instead of RUNLEDGER_LOCAL or .runledger/local.json upward. */
  localFile?: string;
  /** Calls the API. Default globalThis.fetch. */
  fetch?: typeof fetch;
  logger?: Logger;
  /** Send every completion to the events queue instead of the complete route. */
  queueCompletions?: boolean;
  visibilityTimeoutMs?: number;
  pollWaitMs?: number;
  shutdownGraceMs?: number;
  stopTimeoutMs?: number;
  deadlineReserveMs?: number;
  defaultHeartbeatIntervalMs?: number;
  completeTimeoutMs?: number;
  claimTimeoutMs?: number;
  reportTimeoutMs?: number;
}

export declare const defaults: Readonly<Required<Omit<WorkerOptions,
  'handler' | 'pool' | 'name' | 'apiUrl' | 'queueUrl' | 'eventsQueueUrl' | 'sqs' | 'localFile' | 'fetch' | 'logger' | 'queueCompletions'>>>;

export interface SQSEvent {
  Records: Array<{ messageId: string; body: string; attributes?: Record<string, string> }>;
}
export interface LambdaContext {
  getRemainingTimeInMillis(): number;
}

export interface AttemptResult {
  claimed: boolean;
  outcome?: 'succeeded' | 'failed' | 'cancelled';
  result?: 'applied' | 'duplicate' | 'stale';
  state?: string;
  error?: Error;
}

export declare class Worker {
  constructor(options: WorkerOptions);
  /** "<name>@<boot id>". */
  readonly id: string;
  readonly bootId: string;
  readonly apiUrl: string;
  readonly pool: string;
  /** Processes the pool's queue until stop(); rejects at once when the queue does not exist. */
  run(): Promise<void>;
  /** Stops run() gracefully and resolves when it has. */
  stop(): Promise<void>;
  /** The Lambda handler for the pool's queue (ReportBatchItemFailures). */
  handleSQS(event: SQSEvent, context?: LambdaContext): Promise<{ batchItemFailures: Array<{ itemIdentifier: string }> }>;
  /** Claims, runs and completes over HTTP the attempt an envelope names. */
  runAttempt(envelope: object | string, options?: { deadline?: number }): Promise<AttemptResult>;
}

/** The handler of a function the lambda executor invokes with an envelope. */
export declare function handleInvoke(handler: Handler, options?: Omit<WorkerOptions, 'handler'>):
  (event: object, context?: LambdaContext) => Promise<{ claimed: boolean; outcome: string | null; result: string | null; state: string | null; error: string | null }>;

/** Why the worker aborted a handler's signal. */
export declare class AttemptStopped extends Error {
  readonly kind: 'cancel_requested' | 'run_timeout' | 'shutdown' | 'lambda_deadline' | 'attempt_over' | 'lease_lost';
  readonly category: string;
  readonly outcome: 'failed' | 'cancelled';
  /** Nothing is reported for the attempt. */
  readonly silent: boolean;
}
export declare const stopCauses: Readonly<{
  cancelRequested: AttemptStopped;
  runTimeout: AttemptStopped;
  shutdown: AttemptStopped;
  lambdaDeadline: AttemptStopped;
  attemptOver: AttemptStopped;
  leaseLost: AttemptStopped;
}>;

/** A handler's error with what its completion says. */
export declare class TaskError extends Error {
  constructor(message: string, options?: { retryable?: boolean; category?: string; exitCode?: number; reason?: string; cause?: unknown });
  retryable?: boolean;
  category?: string;
  exitCode?: number;
  reason?: string;
}

/** An answer of the API that is not a success; status 0 when none came. */
export declare class RunledgerError extends Error {
  readonly op: string;
  readonly status: number;
  /** The API's error code (docs/api.md, "Errors"), or unreachable, unexpected_answer, not_claimed. */
  readonly code: string;
  /** The API's sentence. */
  readonly detail: string;
  /** No answer, 429 or a 5xx: the same call may succeed. */
  readonly transient: boolean;
}
export declare function isTransient(err: unknown): boolean;
/** A 409 already_claimed, stale_attempt or illegal_transition, or a 401 invalid_token. */
export declare function isRefusal(err: unknown): boolean;

/** A field the contract refuses, raised before anything is sent. */
export declare class FieldError extends Error {
  readonly field: string;
  readonly code: 'invalid_field' | 'payload_too_large';
}

export interface ClientOptions {
  apiUrl?: string;
  apiKey?: string;
  fetch?: typeof fetch;
  timeoutMs?: number;
  localFile?: string;
}
/** The typed client of the main routes, with the API key as bearer. */
export declare class RunledgerClient {
  constructor(options?: ClientOptions);
  readonly apiUrl: string;
  createJob(def: Record<string, unknown>, options?: { dryRun?: boolean }): Promise<Job>;
  getJob(name: string): Promise<Job>;
  listJobs(options?: { limit?: number; nextToken?: string }): Promise<{ jobs: Job[]; nextToken: string | null }>;
  deleteJob(name: string): Promise<void>;
  trigger(job: string, options?: { params?: Record<string, Json>; logicalTime?: Date | string; idempotencyKey?: string }): Promise<RunDetail>;
  getRun(id: string): Promise<RunDetail>;
  cancelRun(id: string, options?: { reason?: string; operator?: string }): Promise<RunDetail>;
  cancelTask(id: string, task: string, options?: { reason?: string; operator?: string }): Promise<RunDetail>;
  listRuns(options?: { job?: string; status?: string; limit?: number; nextToken?: string }): Promise<{ runs: Run[]; nextToken: string | null }>;
}

export interface Job {
  id: string;
  name: string;
  version: number;
  [field: string]: unknown;
}
export interface Run {
  id: string;
  job: string;
  execution_state: string;
  status: string;
  params?: Record<string, Json>;
  [field: string]: unknown;
}
export interface Attempt {
  n: number;
  state: string;
  worker_id: string | null;
  error_category: string | null;
  [field: string]: unknown;
}
export interface TaskView {
  task: string;
  state: string;
  status: string;
  attempt: number;
  output?: Json;
  cancel_requested: boolean;
  attempts: Attempt[];
  [field: string]: unknown;
}
export interface RunDetail {
  run: Run;
  tasks: TaskView[];
}

/** The local stack's file (docs/api.md, "The local stack's file"), or null when there is none. */
export declare function loadLocal(options?: { path?: string; dir?: string }): null | {
  path: string;
  api_url: string;
  api_key: string;
  dynamodb_endpoint: string;
  sqs_endpoint: string;
  region: string;
  table: string;
  queues: Record<string, string>;
};

export declare function conditionCheck(fence: object | undefined, ref: string): FenceCheck;
export declare function parseDuration(field: string, s: string | undefined): number;
export declare function parseEnvelope(body: string | object): object;
export declare function ulid(now?: number): string;
export declare const LEASE_LIFETIME: number;
export declare const MAX_FENCE_MARGIN_MS: number;
export declare const MAX_OUTPUT_BYTES: number;
export declare const MAX_OUTPUT_REF_BYTES: number;
export declare const MAX_ERROR_CATEGORY_LEN: number;
export declare const MAX_REASON_BYTES: number;
export declare const MAX_EVENT_ID_LEN: number;
