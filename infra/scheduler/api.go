package scheduler

import (
	"encoding/json"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
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
		if reason, ok := publicRouteReasons[r.Path]; ok && r.Public {
			for _, route := range *routes {
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
	s.logAccess(p, api)
	return api
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
// own, and throttles the stage.
func (s *Scheduler) logAccess(p Props, api awsapigatewayv2.HttpApi) {
	logs := awslogs.NewLogGroup(s.Construct, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     p.LogRetention,
		RemovalPolicy: p.RemovalPolicy,
	})
	// The L2 stage takes access log settings only when it is created, and
	// HttpApi creates its default stage itself.
	stage := api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
		ThrottlingRateLimit:  jsii.Number(p.APIThrottleRate),
		ThrottlingBurstLimit: jsii.Number(p.APIThrottleBurst),
	})
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: logs.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})
	s.AccessLogs = logs
}
