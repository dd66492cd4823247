package scheduler

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Route is one route of the HTTP API and whether the gateway authorizes it.
type Route struct {
	Method awsapigatewayv2.HttpMethod
	Path   string
	// Public routes carry no gateway authorizer. The worker routes carry
	// `Authorization: Bearer <attempt token>`, which the handler checks and
	// which would collide with SigV4's own Authorization header.
	Public bool
}

// Routes lists the routes the construct creates: one for every route of
// the handler (shared/api's route table; a test holds them equal), so no
// request reaches the function only through $default. Everything else,
// the $default route included, is authorized by IAM (or JWT when
// configured), so a route the handler adds later is never public by
// accident.
func Routes() []Route {
	return []Route{
		{awsapigatewayv2.HttpMethod_GET, "/healthz", true},
		{awsapigatewayv2.HttpMethod_GET, "/v1/openapi.json", true},
		// The dashboard's page and static assets; its calls to /v1 carry a
		// JWT, so it needs the JWT authorizer option (a browser cannot sign
		// SigV4).
		{awsapigatewayv2.HttpMethod_GET, "/ui", true},
		{awsapigatewayv2.HttpMethod_GET, "/ui/{proxy+}", true},
		{awsapigatewayv2.HttpMethod_POST, "/v1/attempts/claim", true},
		{awsapigatewayv2.HttpMethod_POST, "/v1/attempts/heartbeat", true},
		{awsapigatewayv2.HttpMethod_POST, "/v1/attempts/complete", true},
		// A signal task's callback: the token of its task.signal_requested
		// event is the authorizer (checked by the handler), so a partner's
		// system calls back without the operator's credentials. More
		// specific than /v1/runs/{proxy+}, so the gateway routes it here.
		{awsapigatewayv2.HttpMethod_POST, "/v1/runs/{run}/tasks/{task}/signal", true},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/jobs", false},
		// A run's trigger, apart from the job routes so that it has a
		// throttle of its own (throttle.go).
		{awsapigatewayv2.HttpMethod_POST, "/v1/jobs/{job}/runs", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/jobs/{proxy+}", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/runs", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/runs/{proxy+}", false},
		{awsapigatewayv2.HttpMethod_ANY, "/v1/backfills/{proxy+}", false},
		// Events put by an operator start runs in AWS too (the buses'
		// rules are the usual way in).
		{awsapigatewayv2.HttpMethod_POST, "/v1/events/put", false},
		// Served by the local stack only: in AWS both answer 404, and
		// only to an operator.
		{awsapigatewayv2.HttpMethod_GET, "/v1/events", false},
		{awsapigatewayv2.HttpMethod_GET, "/metrics", false},
	}
}

func (s *Scheduler) newAPI(p Props, fn awslambda.IFunction) awsapigatewayv2.HttpApi {
	api := awsapigatewayv2.NewHttpApi(s.Construct, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		Description:        jsii.String("runledger HTTP API v1"),
		CreateDefaultStage: jsii.Bool(true),
	})
	integration := awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("ApiIntegration"), fn,
		&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
			PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
		})

	var operator awsapigatewayv2.IHttpRouteAuthorizer = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	if p.JWT != nil {
		operator = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("JwtAuthorizer"), jsii.String(p.JWT.Issuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: jsii.Strings(p.JWT.Audiences...)})
	}
	public := awsapigatewayv2.NewHttpNoneAuthorizer()

	var created []constructs.IDependable
	for _, r := range Routes() {
		authorizer := operator
		if r.Public {
			authorizer = public
		}
		routes := api.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{r.Method},
			Integration: integration,
			Authorizer:  authorizer,
		})
		for _, route := range *routes {
			created = append(created, route)
			if reason, ok := publicRouteReasons[r.Path]; ok && r.Public {
				suppress(route, "AwsSolutions-APIG4", reason)
			}
		}
	}
	awsapigatewayv2.NewHttpRoute(s.Construct, jsii.String("ApiDefaultRoute"), &awsapigatewayv2.HttpRouteProps{
		HttpApi:     api,
		RouteKey:    awsapigatewayv2.HttpRouteKey_DEFAULT(),
		Integration: integration,
		Authorizer:  operator,
	})
	s.throttleRoutes(p, api, created)
	s.logAccess(p, api)
	return api
}

// throttleRoutes gives every route of Routes its own throttle on the
// default stage (throttle.go), and $default the public routes'. API
// Gateway refuses route settings that name a route it does not have yet,
// so the stage waits for the routes.
func (s *Scheduler) throttleRoutes(p Props, api awsapigatewayv2.HttpApi, routes []constructs.IDependable) {
	stage := api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	settings := func(t Throttle) *awsapigatewayv2.CfnStage_RouteSettingsProperty {
		return &awsapigatewayv2.CfnStage_RouteSettingsProperty{
			ThrottlingRateLimit:  jsii.Number(t.Rate),
			ThrottlingBurstLimit: jsii.Number(t.Burst),
		}
	}
	stage.SetDefaultRouteSettings(settings(RouteThrottle("$default", p.APIRunRate)))
	// RouteSettings is JSON to CDK: plain maps with CloudFormation's
	// property names.
	byKey := map[string]any{}
	for _, r := range Routes() {
		t := RouteThrottle(r.Key(), p.APIRunRate)
		byKey[r.Key()] = map[string]any{"ThrottlingRateLimit": t.Rate, "ThrottlingBurstLimit": t.Burst}
	}
	stage.SetRouteSettings(byKey)
	api.DefaultStage().Node().AddDependency(routes...)
}

// accessLogFormat is one JSON line per request, in HTTP API $context
// variables: who called which route, the answer, and what went wrong.
var accessLogFormat = func() string {
	b, err := json.Marshal(map[string]string{
		"requestId":        "$context.requestId",
		"requestTimeEpoch": "$context.requestTimeEpoch",
		"ip":               "$context.identity.sourceIp",
		"userAgent":        "$context.identity.userAgent",
		"principal":        "$context.identity.userArn",
		"jwtSubject":       "$context.authorizer.claims.sub",
		"routeKey":         "$context.routeKey",
		"path":             "$context.path",
		"status":           "$context.status",
		"responseLength":   "$context.responseLength",
		"latencyMs":        "$context.responseLatency",
		"authorizerError":  "$context.authorizer.error",
		"integrationError": "$context.integrationErrorMessage",
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// logAccess writes the default stage's access log to a log group of its
// own.
func (s *Scheduler) logAccess(p Props, api awsapigatewayv2.HttpApi) {
	logs := awslogs.NewLogGroup(s.Construct, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     p.LogRetention,
		RemovalPolicy: p.RemovalPolicy,
	})
	// The L2 stage takes access log settings only when it is created, and
	// HttpApi creates its default stage itself.
	stage := api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: logs.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})
	s.AccessLogs = logs
}
